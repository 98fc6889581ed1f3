"""Benchmark the Hamiltonian family on held-out conformers of water (and ethanol), one seeded split each.

Measured in this one run, on the same test split: our model (ΔH = H − H0: closed-form tensor-product ridge
base + equivariant attention network on the residual, real + orbital-energy loss), the closed-form base alone,
the network without H0 input (predicts H; no ridge base, which needs H0), the model without the reciprocal-
space (orbital-energy) term, and H0 itself. Metrics (``sciml.hamiltonian.evaluate.evaluate``): H MAE over all
matrix entries (µHa), the gauge-corrected MAE (docs/hamiltonian.md, "Metrics"), occupied orbital-energy MAE (meV),
HOMO–LUMO gap MAE (meV), occupied-orbital cosine similarity (%), and for our model the coverage / width of 90%
split-conformal intervals on orbital energies (calibrated on the calib split). Speed: model inference per
molecule vs a pyscf SCF of the same molecules, timed in this run (plus the pyscf H0/S build that prediction
needs). Crystals (``--only-crystals`` for this part alone): leave-one-out over the DeepH Si/C folders, the
closed-form ridge vs ridge + equivariant network trained through Lightning (with / without the band-energy loss)
vs H0: occupied-band MAE (meV) against pyscf and H MAE (µHa).
Writes ``benchmarks/results/hamiltonian.json``.

Usage::

    python benchmarks/hamiltonian.py [--epochs 40] [--ethanol-epochs 40] [--scf 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from sciml.cli.config import load_config
from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.train import train
from sciml.hamiltonian.data.datamodule import collate
from sciml.hamiltonian.evaluate import evaluate, summarise
from sciml.hamiltonian.export import calibrate
from sciml.hamiltonian.module import HamiltonianModule
from sciml.hamiltonian.task import build as build_hamiltonian
from sciml.hamiltonian.task import datamodule as hamiltonian_datamodule

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"ours": {}, "no_h0_input": {"network": {"use_h0": False}}, "no_reciprocal_loss": {"loss": {"eig": 0.0}}}


def load(ckpt: Path) -> HamiltonianModule:
    """A HamiltonianModule from a Lightning checkpoint (weights only, strict), in eval mode."""
    state = load_lightning_checkpoint(ckpt)
    module = HamiltonianModule(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    return module.eval()


def fit_variant(cfg: dict, name: str, epochs: int, out: Path) -> Path:
    """Train one variant in ``out/<name>-e<epochs>`` (reused when its best.ckpt exists); return best.ckpt."""
    cfg = copy.deepcopy(cfg)
    for section, values in VARIANTS[name].items():
        cfg["model"][section] = (cfg["model"].get(section) or {}) | values
    cfg["run_dir"] = str(out / f"{name}-e{epochs}")
    cfg["trainer"] |= {"max_epochs": epochs, "enable_progress_bar": False}
    ckpt = Path(cfg["run_dir"]) / "checkpoints" / "best.ckpt"
    if not ckpt.is_file() or not (Path(cfg["run_dir"]) / "calibrator.json").is_file():
        start = time.perf_counter()
        train(cfg, test=False)
        (Path(cfg["run_dir"]) / "train_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    return ckpt


def measure(module, dm, alpha: float) -> dict:
    """Test metrics plus conformal coverage of orbital energies (calib split → test split)."""
    return calibrate(module, dm, alpha)[1]


def rotated_copies(dm, seed: int = 0) -> list[dict]:
    """The test split with every conformer under its own random O(3) element (H, H0, S as D M Dᵀ, exact D)."""
    from sciml.hamiltonian.data.datamodule import structure_to_sample
    from sciml.hamiltonian.orbitals import block_wigner
    from sciml.hamiltonian.structure import HamiltonianStructure
    from sciml.testing import random_orthogonal

    rng = np.random.default_rng(seed)
    out = []
    for smp in dm.datasets["test"]:
        numbers, n = smp["z"].numpy(), int(smp["n_ao"][0])
        q = random_orthogonal(rng)
        d = block_wigner(dm.layout, numbers, q).numpy()
        mats = {k: d @ smp[key].reshape(n, n).numpy() @ d.T for k, key in (("H", "h"), ("H0", "h0"), ("S", "s"))}
        st = HamiltonianStructure.from_dense(numbers, smp["pos"].numpy() @ q.T, mats, dm.layout,
                                             {"n_occupied": int(smp["n_occ"][0])}, order="e3nn")
        out.append(structure_to_sample(st, dm.layout, dm.node_basis, dm.edge_basis, dm.cutoff, dm.n_virtual))
    return out


def inference_seconds(module, dm, n: int = 20) -> float:
    """Median wall time of one molecule's forward + assembly + eigenvalues (batch of 1, after a warm-up)."""
    samples = dm.datasets["test"][:n]
    module.predict_step(collate(samples[:1]))
    times = []
    for s in samples:
        start = time.perf_counter()
        module.predict_step(collate([s]))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def scf_seconds(path: str, indices: list[int], threads: int) -> dict:
    """Time a pyscf SCF (same settings as the data) and the H0+S build time of prediction, per molecule."""
    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf
    from sciml.hamiltonian.data.npz import read_npz
    from sciml.hamiltonian.scf.molecule import zeroth_step

    structures, layout = read_npz(path)
    scf, zeroth = [], []
    for k in indices:
        s = structures[k]
        scf.append(run_molecule_scf(s.numbers, s.positions, SCFSettings(threads=threads))["scf_seconds"])
        start = time.perf_counter()
        zeroth_step(s.numbers, s.positions, s.meta.get("basis", "def2-svp"), s.meta.get("xc", "pbe"), layout)
        zeroth.append(time.perf_counter() - start)
    return {"scf_seconds": float(np.mean(scf)), "h0_and_overlap_seconds": float(np.mean(zeroth)),
            "n_molecules": len(indices)}


def molecule(config: str, epochs: int, out: Path, variants, alpha: float, main_run: str | None,
             limit: int | None = None) -> dict:
    """Train/measure ``variants`` of one molecule's config, plus H0 itself and optionally a longer main run."""
    cfg = load_config(ROOT / config)
    cfg["data"]["limit"] = limit
    dm = hamiltonian_datamodule(cfg)
    results, modules = {}, {}
    for name in variants:
        ckpt = fit_variant(cfg, name, epochs, out / Path(config).stem)
        modules[name] = load(ckpt)
        results[name] = measure(modules[name], dm, alpha) | {"epochs": epochs}
        print(name, json.dumps(results[name]), flush=True)
    _, untrained = build_hamiltonian(cfg)  # closed-form ridge alone: its network read-out starts at zero
    if untrained.ridge is not None:
        results["closed_form_ridge_only"] = measure(untrained.eval(), dm, alpha)
        print("closed_form_ridge_only", json.dumps(results["closed_form_ridge_only"]), flush=True)
    results["h0_itself"] = summarise(evaluate(next(iter(modules.values())), dm.test_dataloader(), h_source="h0"))
    if main_run and (Path(main_run) / "checkpoints" / "best.ckpt").is_file():
        modules["main"] = load(Path(main_run) / "checkpoints" / "best.ckpt")
        results["ours_main_run"] = measure(modules["main"], dm, alpha) | {"run": main_run}
    rotated = torch.utils.data.DataLoader(rotated_copies(dm), batch_size=dm.batch_size, collate_fn=collate)
    results["ours_on_rotated_test"] = summarise(evaluate(modules["ours"], rotated))
    best = modules.get("main", modules["ours"])
    results["speed"] = {"model_seconds_per_molecule": inference_seconds(best, dm)}
    results["split_sizes"] = dm.split_sizes()
    results["data"] = cfg["data"]["path"]
    return results


#: crystal network variants of the leave-one-out: model.loss overrides of configs/hamiltonian/si-c.yaml
CRYSTAL_VARIANTS = {"ridge_net_band_loss": {}, "ridge_net_no_band_loss": {"eig": 0.0}}


def _fold_config(structures, held: int, folder: Path, epochs: int | None) -> dict:
    """configs/hamiltonian/si-c.yaml on the crystals other than ``held`` (copied under ``folder``).

    One of them is the val split (model selection); no calib / test split (the held-out crystal is the test).
    """
    import shutil

    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "hamiltonian" / "si-c.yaml").read_text())
    data = folder / "data"
    for m, s in enumerate(structures):
        if m != held:
            copy_ = data / f"{m:03d}"
            if not copy_.exists():
                shutil.copytree(Path(s.meta["source"]), copy_)
    n = len(structures) - 1
    cfg["run_dir"] = str(folder / "run")
    cfg["data"] |= {"path": str(data), "split": {"fractions": [(n - 1) / n, 1 / n, 0.0, 0.0], "seed": 0}}
    cfg["trainer"] |= {"enable_progress_bar": False} | ({"max_epochs": epochs} if epochs else {})
    every = int(cfg["trainer"].get("check_val_every_n_epoch", 1))
    cfg["trainer"]["check_val_every_n_epoch"] = min(every, int(cfg["trainer"]["max_epochs"]))  # best.ckpt exists
    return cfg


def crystals(root: Path, network: bool = True, steps: int | None = None, work: Path | None = None) -> dict:
    """Leave-one-out over the periodic DeepH folders under ``root`` (per element).

    Per held-out crystal: the closed-form ridge (the module before training: its read-out starts at zero), the
    ridge + equivariant network trained through Lightning (``sciml.core.train``, best val checkpoint) with and
    without the band-energy loss, and H0 itself; H MAE (µHa) and occupied-band MAE (meV) against pyscf at the
    generator's off-mesh check k-points.
    """
    import tempfile

    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.core.train import train
    from sciml.hamiltonian.artifact import HamiltonianPredictor
    from sciml.hamiltonian.bands import predict_crystal
    from sciml.hamiltonian.data.crystal import read_crystals
    from sciml.hamiltonian.module import HamiltonianModule
    from sciml.hamiltonian.periodic import crystal_errors
    from sciml.hamiltonian.task import build

    def errors(module, held):
        predictor = HamiltonianPredictor(module.eval(), None, module.layout, "", "", Path("."), True, {})
        return crystal_errors(predict_crystal(held, predictor), held, module.layout)

    structures, _ = read_crystals(root)
    work = Path(work or tempfile.mkdtemp(prefix="ham-crystal-loo-"))
    rows = []
    for k, held in enumerate(structures):
        cfg = _fold_config(structures, k, work / f"fold{k}", steps)
        _, ridge_only = build(cfg)
        e = errors(ridge_only, held)
        row = {"name": held.meta.get("name"), "index": held.meta.get("index"),
               "h0": {"h_mae_microhartree": e["h0_mae_microhartree"],
                      "occupied_band_mae_mev": e["h0_occupied_band_mae_mev"]},
               "reference_h_occupied_band_mae_mev": e["reference_h_occupied_band_mae_mev"],
               "ridge": {"h_mae_microhartree": e["h_mae_microhartree"],
                         "occupied_band_mae_mev": e["model_occupied_band_mae_mev"]}}
        for name, loss in (CRYSTAL_VARIANTS.items() if network else ()):
            run = copy.deepcopy(cfg)
            run["run_dir"] = str(work / f"fold{k}" / name)
            run["model"]["loss"] |= loss
            start = time.perf_counter()
            metrics = train(run, test=False)
            state = load_lightning_checkpoint(metrics["best_checkpoint"])
            module = HamiltonianModule(**state["hyper_parameters"])
            module.load_state_dict(state["state_dict"], strict=True)
            e = errors(module, held)
            row[name] = {"h_mae_microhartree": e["h_mae_microhartree"],
                         "occupied_band_mae_mev": e["model_occupied_band_mae_mev"],
                         "train_seconds": time.perf_counter() - start, "best_val_mae": metrics.get("val_mae")}
        rows.append(row)
        print("crystal", json.dumps(row), flush=True)
    base = _fold_config(structures, 0, work / "fold0", steps)
    out = {"settings": {"model": base["model"], "trainer": base["trainer"], "variants": CRYSTAL_VARIANTS},
           "per_structure": rows, "data": str(root)}
    models = [m for m in rows[0] if isinstance(rows[0][m], dict)]
    for name in sorted({r["name"] for r in rows}):
        sel = [r for r in rows if r["name"] == name]
        out[name] = {m: {key: float(np.mean([r[m][key] for r in sel])) for key in ("h_mae_microhartree",
                                                                                  "occupied_band_mae_mev")}
                     for m in models}
        out[name]["reference_h_occupied_band_mae_mev"] = float(np.mean([r["reference_h_occupied_band_mae_mev"]
                                                                        for r in sel]))
        out[name]["n_structures"] = len(sel)
    return out


def print_crystals(res: dict) -> None:
    """One row per element and model: occupied-band MAE (meV) and H MAE (µHa), leave-one-out means."""
    for name, row in res.items():
        if isinstance(row, dict) and "n_structures" in row:
            for m, v in row.items():
                if isinstance(v, dict):
                    print(f"{name:3} {m:32} band {v['occupied_band_mae_mev']:9.2f} meV   "
                          f"H {v['h_mae_microhartree']:9.3f} µHa")


def main() -> None:
    """Parse arguments, run water and ethanol, time pyscf, write the JSON, print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--ethanol-epochs", type=int, default=40)
    p.add_argument("--main-run", default=None, help="a longer water run folder to evaluate as well")
    p.add_argument("--scf", type=int, default=2, help="conformers timed with a pyscf SCF")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--limit", type=int, default=None, help="use only the first N conformers (smoke tests)")
    p.add_argument("--crystals", default=str(ROOT / "runs" / "hamiltonian_data" / "crystals" / "deeph"),
                   help="per-element DeepH crystal folders (sciml data hamiltonian --crystal); skipped if absent")
    p.add_argument("--only-crystals", action="store_true", help="run the crystal part only, merging into --output")
    p.add_argument("--no-crystal-network", action="store_true", help="crystals: closed-form ridge and H0 only")
    p.add_argument("--crystal-steps", type=int, default=None,
                   help="crystals: training epochs = full-batch steps (default: configs/hamiltonian/si-c.yaml)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "runs"))
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "hamiltonian.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.only_crystals:
        res = json.loads(Path(args.output).read_text())
        res["crystals"] = crystals(Path(args.crystals), not args.no_crystal_network, args.crystal_steps)
        atomic_write_text(args.output, json.dumps(res, indent=1))
        print_crystals(res["crystals"])
        print(f"wrote {args.output}")
        return
    res = {"settings": vars(args) | {"torch_threads": args.threads}}
    res["water"] = molecule("configs/hamiltonian/water.yaml", args.epochs, out, list(VARIANTS), args.alpha,
                            args.main_run, args.limit)
    res["ethanol"] = molecule("configs/hamiltonian/ethanol.yaml", args.ethanol_epochs, out, ["ours"], args.alpha,
                              None, args.limit)
    for mol in ("water", "ethanol"):
        cfg = load_config(ROOT / f"configs/hamiltonian/{mol}.yaml")
        split = json.loads((out / mol / f"ours-e{args.epochs if mol == 'water' else args.ethanol_epochs}"
                            / "split.json").read_text())
        idx = [int(s.rsplit(":", 1)[1]) for s in split["test"][: args.scf]]
        speed = res[mol]["speed"] | scf_seconds(cfg["data"]["path"], idx, args.threads)
        speed["scf_over_model"] = speed["scf_seconds"] / speed["model_seconds_per_molecule"]
        speed["scf_over_model_plus_h0"] = speed["scf_seconds"] / (speed["model_seconds_per_molecule"]
                                                                  + speed["h0_and_overlap_seconds"])
        res[mol]["speed"] = speed
    if Path(args.crystals).is_dir():
        res["crystals"] = crystals(Path(args.crystals), not args.no_crystal_network, args.crystal_steps)
    atomic_write_text(args.output, json.dumps(res, indent=1))
    print_table(res)
    print(f"wrote {args.output}")


def print_table(res: dict) -> None:
    """Print one row per model and a speed line per molecule."""
    cols = ("h_mae_microhartree", "gauge_mae_microhartree", "occupied_energy_mae_mev", "gap_mae_mev",
            "occupied_cosine_percent", "test_coverage")
    print(f"{'molecule':8} {'model':20} " + " ".join(f"{c[:16]:>16}" for c in cols))
    for mol in ("water", "ethanol"):
        for name, row in res[mol].items():
            if isinstance(row, dict) and "h_mae_microhartree" in row:
                print(f"{mol:8} {name:20} " + " ".join(f"{row.get(c, float('nan')):16.3f}" for c in cols))
        s = res[mol]["speed"]
        print(f"{mol:8} speed: model {1e3 * s['model_seconds_per_molecule']:.1f} ms, SCF {s['scf_seconds']:.2f} s "
              f"(ratio {s['scf_over_model']:.0f}x; with pyscf H0+S {s['scf_over_model_plus_h0']:.1f}x)")


if __name__ == "__main__":
    main()
