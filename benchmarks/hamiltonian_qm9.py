"""QM9 molecules: H0, the closed-form ridge and the network (ridge + equivariant net), side by side on the same split.

One npz per QM9 molecule at its QM9 geometry (``--data``, PBE/def2-SVP, made by ``sciml data hamiltonian --source
qm9``); the file list is a sorted snapshot taken at the start, so files added while the benchmark runs are not used.
Every model is trained with ``configs/hamiltonian/organic.yaml`` (``--config``) through
:func:`sciml.core.train.train` and exported with calibration (:func:`sciml.core.export.export`), then scored on
its test molecules:

- ``h0``: the zeroth-step Hamiltonian itself (no model);
- ``ridge``: the closed-form tensor-product ridge alone (the trained model with its network read-outs zeroed);
- ``network``: ridge + equivariant network, the best checkpoint as trained; its 90% intervals (occupied orbitals)
  are those of the exported artifact, given only when the export's val check kept the network
  (:mod:`sciml.hamiltonian.select`); ``exported`` records that check and the coverage of what export ships.

Three measurements, one run:

1. ``random``: a seeded random split of the molecules into train / val / calib / test;
2. ``size``: like QH9-stable-ood, the molecules with the most atoms (``--size-cut`` atoms or more, else the largest
   ``--size-test-fraction`` of the molecules, whole atom counts) are the test set; val, calib and train come from
   the smaller molecules, with as many training molecules as the random split (fewer if the small ones run out).
   With ``--size-data FOLDER`` (e.g. ``sciml data hamiltonian --molecule smiles-large``: 10–14 heavy atoms, QM9
   stops at 9) the random split's model is tested on that folder's molecules instead;
3. ``learning_curve``: the random split's test, val and calib molecules fixed, nested training sets of
   ``--train-sizes`` molecules (a size above the training pool becomes the pool; the largest point is the random
   split's model; every run trains ``--epochs`` epochs, more where ``--min-steps`` asks, so a smaller set takes
   fewer optimiser steps unless ``--min-steps`` is set, and validates about ``--epochs`` times); per method
   a power law ``error = a·N^(-b)`` fitted by least squares in log–log, with the error it predicts at 10× the
   largest size (an extrapolation, not a measurement).

Metrics per method, means over the test molecules: H MAE over all matrix entries (µHa), occupied orbital-energy MAE
(meV), |HOMO–LUMO gap error| (meV); for the network the coverage of its 90% intervals on the occupied orbital
energies and the share of infinite intervals. The data module's split is fixed exactly: every run's folder holds
symbolic links to its molecules, named so that the seeded molecule split of the data module
(:func:`sciml.core.splits.group_split`) puts each in its intended split (checked before training).

Writes ``benchmarks/results/hamiltonian_qm9.json`` (split sizes, the command, every number) and
``hamiltonian_qm9.md`` beside it (the tables, also printed). Runs, checkpoints and artifacts go under ``--work``;
the command is resumable: run again, it reuses the finished runs of the same molecules and settings and resumes an
unfinished one from its ``last.ckpt`` (``--checkpoint-every`` steps), so a multi-hour CPU run survives a kill.
``--extra-train FOLDER`` adds molecules (e.g. the organic training set) to every run's training set.

Usage::

    sciml data release unpack datasets/qm9/release --out runs/data/qm9-release --workers 2
    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_qm9.py --data runs/data/qm9-release \
        --size-data runs/data/smiles-large --train-sizes 100 300 1000 3000
    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_qm9.py --quick      # a smoke run: small network, 1 epoch
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_json  # noqa: E402  (benchmarks/_results.py: atomic, complete runs only)
from hamiltonian_organic import errors, module_copy, reference, ridge_only  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hamiltonian_qm9.json"
CONFIG = ROOT / "configs" / "hamiltonian" / "organic.yaml"
METHODS = ("h0", "ridge", "network")
QUICK = {"train_sizes": [4, 8], "epochs": 1, "n_test": 4, "n_val": 2, "n_calib": 3, "batch_size": 4,
         "network": {"hidden": "8x0e+4x1o+2x1e+2x2e+2x2o", "n_layers": 1, "lmax": 2, "radial_hidden": 16},
         "domain": {"beta": 0.25, "k": 2}}
"""``--quick``: a smoke run (small network, one epoch, a few molecules per split); explicit flags win."""
PREDICT_CHUNK = 8  # test molecules per network call (bounded memory)


class Split(NamedTuple):
    """Molecule files per split (train, val, calib, test), in the order they were drawn."""

    train: list[Path]
    val: list[Path]
    calib: list[Path]
    test: list[Path]

    def sizes(self) -> dict[str, int]:
        """Molecules per split."""
        return {name: len(files) for name, files in self.parts().items()}

    def parts(self) -> dict[str, list[Path]]:
        """``{split name: files}`` in :data:`sciml.core.splits.SPLIT_NAMES` order."""
        return {"train": self.train, "val": self.val, "calib": self.calib, "test": self.test}

    def fractions(self) -> list[float]:
        """Share of the molecules in each split, in :meth:`parts` order (the data module's ``split.fractions``)."""
        n = sum(self.sizes().values())
        return [len(files) / n for files in self.parts().values()]


def snapshot(data: Path) -> list[Path]:
    """The sorted ``*.npz`` files of ``data`` now (files a running generator adds later are not used)."""
    files = sorted(Path(data).glob("*.npz"))
    if not files:
        raise SystemExit(f"{data} holds no .npz files; make them with `sciml data hamiltonian --source qm9 --out "
                         f"{data}`")
    return files


def atom_counts(files: list[Path], heavy: bool = False) -> np.ndarray:
    """Atoms (or heavy atoms: not hydrogen) per molecule file, shape (n_files,)."""
    counts = []
    for path in files:
        with np.load(path) as data:
            numbers = np.asarray(data["atomic_numbers"]).reshape(-1)
        counts.append(int((numbers > 1).sum() if heavy else numbers.size))
    return np.asarray(counts, dtype=int)


def atom_range(files: list[Path], heavy: bool = False) -> list[int]:
    """[fewest, most] atoms (or heavy atoms) of the molecule files."""
    counts = atom_counts(files, heavy)
    return [int(counts.min()), int(counts.max())]


def split_counts(n: int, args) -> tuple[int, int, int]:
    """Molecules in test, val and calib: the explicit ``--n-*`` counts, else the fractions of ``n`` (at least 1)."""
    def count(explicit, fraction):
        return int(explicit) if explicit is not None else max(1, round(fraction * n))

    return (count(args.n_test, args.test_fraction), count(args.n_val, args.val_fraction),
            count(args.n_calib, args.calib_fraction))


def random_molecule_split(files: list[Path], n_test: int, n_val: int, n_calib: int, seed: int) -> Split:
    """A seeded random split of the molecules; ``train`` is the whole remaining pool, in drawn order."""
    if n_test + n_val + n_calib >= len(files):
        raise SystemExit(f"{len(files)} molecules: too few for {n_test} test, {n_val} val, {n_calib} calib and a "
                         "training set")
    order = [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
    a, b = n_test, n_test + n_val
    return Split(order[b + n_calib:], order[a:b], order[b:b + n_calib], order[:a])


def size_cut(counts: np.ndarray, fraction: float) -> int:
    """The fewest atoms of the size split's test molecules: the largest whole atom counts within ``fraction``.

    The smallest count ``c`` with at most ``fraction`` of the molecules having ``>= c`` atoms; at least the
    largest atom count, at most one above the smallest (so the training molecules are never empty).
    """
    values = np.unique(counts)
    inside = [c for c in values if (counts >= c).mean() <= fraction]
    cut = int(inside[0]) if inside else int(values[-1])
    return max(cut, int(values[1])) if len(values) > 1 else cut


def size_split(files: list[Path], counts: np.ndarray, cut: int, n_val: int, n_calib: int, n_train: int,
               seed: int) -> Split:
    """Test: every molecule with ``>= cut`` atoms; val, calib, train (at most ``n_train``): seeded, from the rest."""
    large = [f for f, c in zip(files, counts, strict=True) if c >= cut]
    small = [f for f, c in zip(files, counts, strict=True) if c < cut]
    if not large or len(small) <= n_val + n_calib:
        raise SystemExit(f"size split at {cut} atoms: {len(large)} test and {len(small)} smaller molecules; too few "
                         f"for {n_val} val and {n_calib} calib and a training set (set --size-cut)")
    order = [small[i] for i in np.random.default_rng(seed).permutation(len(small))]
    b = n_val + n_calib
    return Split(order[b:b + n_train], order[:n_val], order[n_val:b], large)


def train_sizes(requested: list[int], pool: int) -> list[int]:
    """The learning curve's training-set sizes: ``requested`` with sizes above ``pool`` replaced by it, sorted."""
    sizes = sorted({min(int(n), pool) for n in requested if int(n) > 0})
    if not sizes:
        raise SystemExit("--train-sizes: give at least one positive size")
    return sizes


def link_folder(folder: Path, split: Split, seed: int) -> list[float]:
    """Fill ``folder`` with links to the split's files so that the data module's seeded split reproduces ``split``.

    The data module sorts the molecule names (file stems) and splits them with
    :func:`sciml.core.splits.random_split` of ``fractions`` and ``seed``; each link is named after the sorted
    position that split gives its molecule. Returns the ``fractions`` (train, val, calib, test) to configure.
    """
    from sciml.core.splits import group_split, random_split

    parts, fractions = split.parts(), split.fractions()
    positions = random_split(sum(split.sizes().values()), fractions, seed)
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for name, files in parts.items():
        for position, path in zip(positions[name], files, strict=True):
            link = folder / f"{int(position):05d}-{path.stem}.npz"
            link.symlink_to(path.resolve())
            names[link.stem] = name
    stems = sorted(names)
    check = group_split(stems, fractions, seed)
    if any(names[stems[i]] != name for name, idx in check.items() for i in idx):
        raise RuntimeError(f"{folder}: the data module's split does not reproduce the intended one")
    return fractions


def run_config(base: dict, folder: Path, run_dir: Path, fractions: list[float], args) -> dict:
    """The training config: ``base`` with the linked folder, its exact split, epochs and any smaller network."""
    cfg = copy.deepcopy(base)
    cfg["run_dir"], cfg["seed"], cfg["threads"] = str(run_dir), args.seed, args.threads
    cfg["data"] |= {"path": str(folder), "split": {"fractions": fractions, "seed": args.seed, "by": "molecule"}}
    if args.batch_size:
        cfg["data"]["batch_size"] = args.batch_size
    cfg["model"]["network"] |= args.network
    cfg["trainer"] |= {"max_epochs": args.epochs, "enable_progress_bar": False, "enable_model_summary": False}
    if args.domain:
        cfg.setdefault("calibration", {})["domain"] = dict(args.domain)
    if args.checkpoint_every:
        cfg["checkpoint"] = {"every_n_train_steps": int(args.checkpoint_every)}
    return cfg


def run_record(split: Split, base: dict, args) -> dict:
    """What a run folder was made for: its molecule files per split and the training settings that shape it."""
    parts = {name: [str(p.resolve()) for p in files] for name, files in split.parts().items()}
    return {"split": parts, "config": base, "epochs": args.epochs, "min_steps": args.min_steps, "seed": args.seed,
            "batch_size": args.batch_size, "network": args.network, "domain": args.domain, "alpha": args.alpha}


def prepare_run(work: Path, split: Split, base: dict, args) -> bool:
    """Make ``work`` the folder of ``split``'s run; True when it already holds that run (kept, to finish or reuse).

    A folder made for other molecules or settings (``run.json``), or any folder with ``--fresh``, is replaced.
    """
    import shutil

    from sciml.core.io.atomic import atomic_write_text

    record = json.loads(json.dumps(run_record(split, base, args)))
    state = work / "run.json"
    if not args.fresh and state.is_file() and json.loads(state.read_text()) == record:
        return True
    if work.exists():
        shutil.rmtree(work)
    link_folder(work / "data", split, args.seed)
    atomic_write_text(state, json.dumps(record, indent=1) + "\n")
    return False


def run_epochs(n_train: int, batch_size: int, args) -> int:
    """``--epochs``, raised so that a small training set still takes ``--min-steps`` optimiser steps."""
    per_epoch = math.ceil(n_train / batch_size)
    return max(int(args.epochs), math.ceil(int(args.min_steps or 0) / per_epoch))


def fit_and_export(name: str, split: Split, base: dict, args) -> dict:
    """Train on ``split`` (plus ``--extra-train``), export with calibration; the artifact, checkpoint and metrics.

    Resumable: a run folder of the same split and settings is reused, its training resumed from ``last.ckpt``
    (written every ``--checkpoint-every`` steps) and a finished export (``done.json``) read back, not redone.
    """
    from sciml.core.export import export
    from sciml.core.io.atomic import atomic_write_text
    from sciml.core.train import train

    work = Path(args.work) / name
    full = split._replace(train=split.train + args.extra_train)
    kept = prepare_run(work, full, base, args)
    done = work / "done.json"
    if kept and done.is_file():
        print(f"{name}: reusing the finished run in {work}", flush=True)
        state = json.loads(done.read_text())
        return {**state, "artifact": work / "model", "checkpoint": Path(state["checkpoint"])}
    cfg = run_config(base, work / "data", work / "run", full.fractions(), args)
    cfg["trainer"]["max_epochs"] = epochs = run_epochs(len(full.train), int(cfg["data"]["batch_size"]), args)
    # about --epochs validations per run, however many epochs --min-steps asks of a small training set
    cfg["trainer"]["check_val_every_n_epoch"] = max(1, epochs // int(args.epochs))
    start = time.perf_counter()
    fit = train(cfg, test=False, fresh=not kept)
    seconds = time.perf_counter() - start
    metrics = export(fit["best_checkpoint"], work / "model", calibrate=True, alpha=args.alpha, config=cfg)
    state = {"checkpoint": str(fit["best_checkpoint"]), "export": metrics, "train_seconds": seconds,
             "resumed": kept, "epochs": epochs, "extra_train": [str(f) for f in args.extra_train],
             "optimizer_steps": math.ceil(len(full.train) / int(cfg["data"]["batch_size"])) * epochs}
    atomic_write_text(done, json.dumps(state, indent=1, default=float) + "\n")
    return {**state, "artifact": work / "model", "checkpoint": Path(state["checkpoint"])}


def predictors(run: dict) -> dict:
    """Predictors ``exported`` (the artifact), ``ridge`` (its ridge alone), ``network`` (the best checkpoint)."""
    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.hamiltonian.artifact import load_model

    exported = load_model(run["artifact"])
    network = module_copy(exported)
    network.module.load_state_dict(load_lightning_checkpoint(run["checkpoint"])["state_dict"], strict=True)
    return {"exported": exported, "ridge": ridge_only(exported), "network": network}


def predict_chunked(structures: list, predictor, alpha: float | None) -> list:
    """:func:`sciml.hamiltonian.predict.predict_structures` over chunks of :data:`PREDICT_CHUNK` molecules."""
    from sciml.hamiltonian.predict import predict_structures

    out = []
    for k in range(0, len(structures), PREDICT_CHUNK):
        out += predict_structures(structures[k:k + PREDICT_CHUNK], predictor, alpha=alpha)
    return out


def read_test(files: list[Path]) -> list:
    """One structure per test molecule file (its first conformer), ``meta["molecule"]`` the file stem."""
    from sciml.hamiltonian.data.npz import read_npz

    structures = []
    for path in files:
        s = read_npz(path)[0][0]
        s.meta["molecule"] = path.stem
        structures.append(s)
    return structures


def occupied_coverage(result, ref_eps: np.ndarray) -> tuple[float, float]:
    """Share of occupied orbital energies inside their interval, and share of infinite occupied intervals."""
    occ = result.n_occupied
    inside = (result.lower[:occ] <= ref_eps[:occ]) & (ref_eps[:occ] <= result.upper[:occ])
    return float(inside.mean()), float(np.isinf(result.upper[:occ]).mean())


def score(structures: list, models: dict, alpha: float) -> list[dict]:
    """Per test molecule: the errors of H0, the ridge and the network; coverage of the exported intervals."""
    layout = models["exported"].layout
    preds = {name: predict_chunked(structures, models[name], None) for name in ("ridge", "network")}
    shipped = predict_chunked(structures, models["exported"], alpha)
    rows = []
    for i, s in enumerate(structures):
        n_eig = len(preds["network"][i].orbital_energies)
        ref = reference(s, layout, n_eig)
        occ = int(preds["network"][i].n_occupied)
        row = {"molecule": s.meta["molecule"], "n_atoms": int(len(s.numbers)),
               "h0": errors(ref["H0"], ref["eps_h0"], ref, occ)}
        for name, res in preds.items():
            row[name] = errors(res[i].hamiltonian, res[i].orbital_energies, ref, occ)
        row["coverage"], row["infinite_share"] = occupied_coverage(shipped[i], ref["eps"])
        rows.append(row)
    return rows


def summarise(rows: list[dict], run: dict, split: Split) -> dict:
    """Means over the test molecules per method, the split sizes, and the export's network check."""
    check = run["export"].get("network_check", {})
    used = bool(check.get("network_used", True))
    out = {"split_sizes": split.sizes(), "extra_train_files": len(run["extra_train"]),
           "train_seconds": round(run["train_seconds"], 1), "resumed": run["resumed"], "epochs": run["epochs"],
           "optimizer_steps": run["optimizer_steps"]}
    for name in METHODS:
        out[name] = {key: float(np.mean([r[name][key] for r in rows])) for key in rows[0][name]}
    cover = {"coverage": float(np.mean([r["coverage"] for r in rows])),
             "infinite_share": float(np.mean([r["infinite_share"] for r in rows]))}
    out["network"] |= cover if used else {"coverage": None, "infinite_share": None}
    out["exported"] = {"network_used": used, "val_h_mae_network_microhartree": check.get("val_h_mae_network"),
                       "val_h_mae_ridge_microhartree": check.get("val_h_mae_ridge"), **cover}
    out["n_atoms_test"] = [int(min(r["n_atoms"] for r in rows)), int(max(r["n_atoms"] for r in rows))]
    return out


def measure(name: str, split: Split, base: dict, args, per_molecule: bool = True, run: dict | None = None) -> dict:
    """Score ``split``'s test molecules; print one line.

    The model is ``run`` (one already trained on the split's training molecules), else trained and exported here.
    """
    run = run or fit_and_export(name, split, base, args)
    rows = score(read_test(split.test), predictors(run), args.alpha)
    out = summarise(rows, run, split)
    if per_molecule:
        out["per_molecule"] = rows
    line = "  ".join(f"{m} {out[m]['h_mae_microhartree']:8.1f} µHa {out[m]['occ_mae_mev']:7.1f} meV" for m in METHODS)
    cov = out["exported"]["coverage"]
    print(f"{name:12s} n_train {len(split.train):4d}  {line}  coverage {cov:.2f}", flush=True)
    return out


def power_law(sizes: list[int], values: list[float]) -> dict:
    """Least-squares fit of ``log e = log a − b log N``; ``a``, ``b`` and ``e`` at 10× the largest ``N``."""
    if len(sizes) < 2:
        return {"a": None, "b": None, "extrapolated_n": None, "extrapolated_error": None}
    slope, intercept = np.polyfit(np.log(sizes), np.log(values), 1)
    n10 = 10 * max(sizes)
    return {"a": float(math.exp(intercept)), "b": float(-slope), "extrapolated_n": int(n10),
            "extrapolated_error": float(math.exp(intercept) * n10 ** slope)}


def curve_fits(points: list[dict]) -> dict:
    """Per method and metric, the :func:`power_law` fit of the learning curve."""
    sizes = [p["n_train"] + p["extra_train_files"] for p in points]
    return {m: {key: power_law(sizes, [p[m][key] for p in points]) for key in ("h_mae_microhartree", "occ_mae_mev")}
            for m in METHODS}


def learning_curve(split: Split, sizes: list[int], base: dict, args, largest: dict) -> dict:
    """The fixed test, val and calib molecules, training on the first ``N`` of the pool for each size."""
    points = []
    for n in sizes:
        if n == len(split.train):
            out = {k: v for k, v in largest.items() if k != "per_molecule"}
        else:
            sub = Split(split.train[:n], split.val, split.calib, split.test)
            out = measure(f"curve-{n}", sub, base, args, per_molecule=False)
        points.append({"n_train": n, **out})
    return {"points": points, "power_law": curve_fits(points)}


def _row(label: str, r: dict) -> str:
    h = " / ".join(f"{r[m]['h_mae_microhartree']:,.0f}" for m in METHODS)
    occ = " / ".join(f"{r[m]['occ_mae_mev']:,.0f}" for m in METHODS)
    gap = " / ".join(f"{r[m]['gap_abs_error_mev']:,.0f}" for m in METHODS)
    s = r["split_sizes"]
    ex = r["exported"]
    infinite = f", {ex['infinite_share']:.0%} infinite" if ex["infinite_share"] else ""
    cover = (f"{ex['coverage']:.3f}{infinite}" if ex["network_used"] else
             f"– (export kept the ridge alone: its coverage {ex['coverage']:.3f}{infinite})")
    extra = f" + {r['extra_train_files']} extra" if r["extra_train_files"] else ""
    return (f"| {label} | {s['train']}{extra} / {s['val']} / {s['calib']} / {s['test']} | {r['n_atoms_test'][0]}–"
            f"{r['n_atoms_test'][1]} | {h} | {occ} | {gap} | {cover} |")


def _size_label(size: dict) -> str:
    """The size split's row label: its atom cut, or the heavy atoms of the molecules it was tested on."""
    if "cut_atoms" in size:
        return f"size (test ≥ {size['cut_atoms']} atoms)"
    lo, hi = size["n_heavy_atoms_test"]
    return f"size (`{Path(size['size_data']).name}`, {lo}–{hi} heavy atoms; trained ≤ {size['n_heavy_atoms_train'][1]})"


def markdown(result: dict) -> str:
    """The three tables: random and size split, learning curve, power-law fits."""
    lines = [f"QM9 molecules: {result['n_molecules']} of `{result['data']}` (PBE/def2-SVP), seed {result['seed']}, "
             f"{result['epochs']} epochs (at least {result.get('min_steps', 0)} optimiser steps per run), 90% "
             "intervals on the occupied orbital energies.", "",
             "| split | molecules train / val / calib / test | test atoms | H MAE µHa: H0 / ridge / network | "
             "occupied MAE meV: H0 / ridge / network | gap error meV: H0 / ridge / network | coverage (90%) |",
             "|---|---|---|---|---|---|---|",
             _row("random", result["random"]), _row(_size_label(result["size"]), result["size"]), "",
             "| training molecules | H MAE µHa: H0 / ridge / network | occupied MAE meV: H0 / ridge / network |",
             "|---|---|---|"]
    for p in result["learning_curve"]["points"]:
        extra = f" + {p['extra_train_files']} extra" if p["extra_train_files"] else ""
        lines.append(f"| {p['n_train']}{extra} | " + " / ".join(f"{p[m]['h_mae_microhartree']:,.0f}" for m in METHODS)
                     + " | " + " / ".join(f"{p[m]['occ_mae_mev']:,.0f}" for m in METHODS) + " |")
    fits = result["learning_curve"]["power_law"]
    n10 = fits["network"]["h_mae_microhartree"]["extrapolated_n"] or "10× the largest N"
    lines += ["", f"| method | H MAE = a·N^(-b): b | extrapolated H MAE at N = {n10} µHa | occupied MAE: b | "
              f"extrapolated occupied MAE at N = {n10} meV |", "|---|---|---|---|---|"]
    for m in METHODS:
        h, o = fits[m]["h_mae_microhartree"], fits[m]["occ_mae_mev"]
        if h["b"] is None:
            continue
        lines.append(f"| {m} | {round(h['b'], 2) + 0.0:.2f} | {h['extrapolated_error']:,.0f} (extrapolation) | "
                     f"{round(o['b'], 2) + 0.0:.2f} | "
                     f"{o['extrapolated_error']:,.0f} (extrapolation) |")
    return "\n".join(lines) + "\n"


def parse(argv=None) -> argparse.Namespace:
    """Command-line flags; ``--quick`` fills the flags not given with :data:`QUICK`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="runs/data/qm9", help="folder of QM9 molecule npz files (one molecule each)")
    ap.add_argument("--config", default=str(CONFIG), help="training config (data.path and split are replaced)")
    ap.add_argument("--train-sizes", type=int, nargs="+", default=None, help="learning-curve training molecules "
                    "(default 25 50 100 200; sizes above the training pool become the pool)")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs of every run (default: the config's)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the molecule splits and of training")
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--calib-fraction", type=float, default=0.1)
    ap.add_argument("--n-test", type=int, default=None, help="test molecules of the random split (over the fraction)")
    ap.add_argument("--n-val", type=int, default=None, help="val molecules of every run (over the fraction)")
    ap.add_argument("--n-calib", type=int, default=None, help="calib molecules of every run (over the fraction)")
    ap.add_argument("--size-test-fraction", type=float, default=0.1,
                    help="size split: at most this share of the molecules, the largest, are its test set")
    ap.add_argument("--size-cut", type=int, default=None, help="size split: test molecules have >= this many atoms")
    ap.add_argument("--size-data", default=None, help="size split: a folder of larger molecules (npz; e.g. "
                    "sciml data hamiltonian --molecule smiles-large) that the random split's model is tested on, "
                    "instead of cutting the largest molecules out of --data")
    ap.add_argument("--extra-train", default=None, help="a folder of npz molecules (e.g. the organic training set, "
                    "several conformers each) added to the training set of every run; the learning curve's N counts "
                    "them too")
    ap.add_argument("--min-steps", type=int, default=0, help="every run takes at least this many optimiser steps "
                    "(more epochs for a small training set, so the learning curve does not starve its small sets)")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="write last.ckpt every this many optimiser "
                    "steps (default: every epoch); a killed run resumes from it when the command is run again")
    ap.add_argument("--fresh", action="store_true", help="start every run over (default: reuse the run folders "
                    "under --work made for the same molecules and settings, resuming unfinished training)")
    ap.add_argument("--batch-size", type=int, default=None, help="molecules per batch (default: the config's)")
    ap.add_argument("--alpha", type=float, default=0.1, help="interval miscoverage (0.1: 90%% intervals)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (OMP_NUM_THREADS, when set, wins)")
    ap.add_argument("--work", default="runs/bench-hamiltonian-qm9", help="runs, checkpoints and artifacts (a run "
                    "folder made for other molecules or settings is replaced)")
    ap.add_argument("--output", default=str(RESULTS), help="results JSON; the markdown tables go beside it (.md)")
    ap.add_argument("--quick", action="store_true", help="smoke run: small network, 1 epoch, a few molecules")
    args = ap.parse_args(argv)
    args.network, args.domain = {}, None
    if args.quick:
        for key in ("train_sizes", "epochs", "n_test", "n_val", "n_calib", "batch_size"):
            if getattr(args, key) is None:
                setattr(args, key, QUICK[key])
        args.network, args.domain = dict(QUICK["network"]), dict(QUICK["domain"])
    args.train_sizes = args.train_sizes or [25, 50, 100, 200]
    args.extra_train = snapshot(Path(args.extra_train)) if args.extra_train else []
    return args


def main(argv=None) -> int:
    """Random split, size split and learning curve; write the JSON and the markdown tables."""
    import torch
    import yaml

    from sciml.core.io.atomic import atomic_write_text

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    base = yaml.safe_load(Path(args.config).read_text())
    args.epochs = args.epochs or int(base["trainer"]["max_epochs"])
    files = snapshot(Path(args.data))
    counts = atom_counts(files)
    n_test, n_val, n_calib = split_counts(len(files), args)
    rand = random_molecule_split(files, n_test, n_val, n_calib, args.seed)
    sizes = train_sizes(args.train_sizes, len(rand.train))
    rand = rand._replace(train=rand.train[:sizes[-1]])
    result = {"command": "python benchmarks/hamiltonian_qm9.py " + shlex.join(argv), "data": str(args.data),
              "n_molecules": len(files), "config": str(args.config), "seed": args.seed, "epochs": args.epochs,
              "alpha": args.alpha, "threads": args.threads, "network_override": args.network,
              "extra_train": {"folder": args.extra_train and str(args.extra_train[0].parent),
                              "files": len(args.extra_train)}, "min_steps": args.min_steps,
              "metrics": "means over test molecules: H MAE over all matrix entries (µHa), occupied orbital-energy "
                         "MAE (meV), |HOMO-LUMO gap error| (meV); coverage of the occupied orbital energies"}
    rand_run = fit_and_export("random", rand, base, args)
    result["random"] = measure("random", rand, base, args, run=rand_run)
    if args.size_data:  # the random split's model on larger molecules from elsewhere: no training on them
        big = rand._replace(test=snapshot(Path(args.size_data)))
        result["size"] = {"size_data": str(args.size_data), **measure("size", big, base, args, run=rand_run)}
    else:
        cut = args.size_cut or size_cut(counts, args.size_test_fraction)
        big = size_split(files, counts, cut, n_val, n_calib, len(rand.train), args.seed)
        result["size"] = {"cut_atoms": int(cut), **measure("size", big, base, args)}
    result["size"]["n_atoms_train"] = atom_range(big.train)
    result["size"]["n_heavy_atoms_train"] = atom_range(big.train, heavy=True)
    result["size"]["n_heavy_atoms_test"] = atom_range(big.test, heavy=True)
    result["learning_curve"] = learning_curve(rand, sizes, base, args, result["random"])
    result["learning_curve"]["note"] = ("power law error = a·N^(-b) fitted in log-log on the measured points; "
                                        "extrapolated_error is its prediction at extrapolated_n, not a measurement")
    result |= {"seconds": round(time.perf_counter() - start, 1), "platform": platform.platform()}
    output = Path(args.output)
    write_json(output, result)
    table = markdown(result)
    atomic_write_text(output.with_suffix(".md"), table)
    print(table)
    print(f"wrote {output} and {output.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
