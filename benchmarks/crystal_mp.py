"""Benchmark the general Materials Project crystal models beside CGCNN and composition baselines, one split.

Formation energy (eV/atom) and band gap (eV) on the test split of the mp36k pool, the split the shipped models were
trained with (``configs/crystal/mp-*.yaml``, seed 42): our PRDNet models (shipped artifacts), the family's
``cgcnn`` network trained by the same command, epochs, split and graphs (usage below), a composition-only baseline
(element fractions → scikit-learn gradient boosting, fitted here) and the train-mean predictor. Band gaps add the
metal/non-metal ROC-AUC (probability of a zero gap; the composition baseline uses a gradient-boosting classifier).
Coverage of the shipped models' 90% intervals is reported overall and per group (elements count, cell-size range,
crystal system; metals and non-metals for band gaps), beside plain split conformal fitted on the same calibration
split. Literature numbers are anchors, not our runs.

Usage::

    sciml fit --config configs/crystal/mp-formation-energy.yaml --model.network "{name: cgcnn, dim: 64, n_layers: 3,
        n_rbf: 40}" --run_dir runs/mp-cgcnn-formation-energy        # and the same for mp-band-gap
    python benchmarks/crystal_mp.py [--threads 2]

Without a CGCNN checkpoint the CGCNN row of the results file is kept when it was measured on the same split (same
split sizes and test size), labelled ``cgcnn (earlier run, same test split)``: a trained model's predictions on a
fixed split do not change between runs, its timing column is from that run.

Writes ``benchmarks/results/crystal_mp.json`` and its tables, ``crystal_mp.md`` (``crystal_mp_tables.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from _results import merge_results
from crystal_mp_tables import markdown
from crystal_perov5 import composition_features

from sciml.crystal.calibration import CRYSTAL_SYSTEMS, graph_structures
from sciml.crystal.export import roc_auc
from sciml.uq import SplitConformal, bounded_width, coverage, coverage_miss_probability

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "crystal_mp.json"
ANCHORS = {  # published test MAEs on Materials Project (not our runs)
    "CGCNN (Xie & Grossman 2018, ~28k train)": {"formation_energy_per_atom": 0.039, "band_gap": 0.388},
    "MEGNet (Chen et al. 2019, ~60k train)": {"formation_energy_per_atom": 0.028, "band_gap": 0.33},
    "ALIGNN (Matbench mp_e_form / mp_gap, ~106k train)": {"formation_energy_per_atom": 0.022, "band_gap": 0.22},
}
GROUPS = ("n_elements", "size_range", "crystal_system")
MIN_GROUP = 200  # test structures a group needs to be judged
TOL = 0.03  # a judged group's coverage should lie within this of 1 - alpha
EARLIER_CGCNN = "cgcnn (earlier run, same test split)"


def load_module(path: Path):
    """A trained crystal model from an artifact folder or a checkpoint (Lightning ``.ckpt`` or ``model.pt``)."""
    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.crystal.module import CrystalRegressor

    if path.is_dir():
        from sciml.crystal.artifact import load_model

        return load_model(path)
    state = load_lightning_checkpoint(path)
    module = CrystalRegressor(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"])
    return module.eval()


@torch.no_grad()
def run_model(module, loader) -> dict[str, np.ndarray]:
    """``mean`` (and ``p_zero``, ``positive`` for zero-inflated models) over ``loader``, plus seconds."""
    out: dict[str, list] = {"mean": [], "p_zero": [], "positive": []}
    start = time.perf_counter()
    for batch in loader:
        pred = module.predict_step(batch)
        out["mean"].append(pred.mean)
        if "p_zero" in pred.meta:
            out["p_zero"].append(pred.meta["p_zero"])
            out["positive"].append(pred.meta["positive"])
    seconds = time.perf_counter() - start
    return {k: torch.cat(v).double().numpy() for k, v in out.items() if v} | {"seconds": seconds}


def composition_baseline(dm, zero_inflated: bool, seed: int = 0) -> dict[str, np.ndarray]:
    """Gradient boosting on element fractions, fitted on the train split; test predictions (and p_zero)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    xt, xs = composition_features(dm.datasets["train"]), composition_features(dm.datasets["test"])
    yt = np.array([float(g.y) for g in dm.datasets["train"]])
    start = time.perf_counter()
    reg = HistGradientBoostingRegressor(max_iter=500, learning_rate=0.1, random_state=seed).fit(xt, yt)
    out = {"mean": reg.predict(xs)}
    if zero_inflated:
        clf = HistGradientBoostingClassifier(max_iter=300, random_state=seed).fit(xt, yt <= 0)
        out["p_zero"] = clf.predict_proba(xs)[:, 1]
        out["mean"] = np.where(out["p_zero"] >= 0.5, 0.0, np.clip(out["mean"], 0.0, None))
    out["seconds"] = time.perf_counter() - start
    return out


def group_labels(structures: list) -> dict[str, np.ndarray]:
    """Group label of every test structure for each grouping of :data:`GROUPS`."""
    from sciml.uq.groups import structure_groups

    return {name: structure_groups(name, structures).numpy() for name in GROUPS}


def group_coverage(covered: np.ndarray, labels: dict[str, np.ndarray], calib: dict[str, np.ndarray] | None = None,
                   alpha: float = 0.1) -> dict:
    """Coverage per group with at least :data:`MIN_GROUP` test structures (and the others' sizes).

    With the calibration split's ``calib`` labels, each group also gets ``n_calib`` and ``p_outside``: the chance
    that an exactly group-calibrated method puts this group outside ±:data:`TOL` on one split
    (:func:`sciml.uq.coverage_miss_probability`), the resolution of the check.
    """
    out = {}
    for name, lab in labels.items():
        for v in np.unique(lab):
            rows = lab == v
            key = f"{name}={CRYSTAL_SYSTEMS[v] if name == 'crystal_system' else v}"
            out[key] = {"n": int(rows.sum()), "coverage": float(covered[rows].mean()) if rows.sum() else None,
                        "judged": bool(rows.sum() >= MIN_GROUP)}
            if calib is not None:
                n_calib = int((calib[name] == v).sum())
                out[key] |= {"n_calib": n_calib, "p_outside": coverage_miss_probability(
                    max(n_calib, 1), int(rows.sum()), alpha, TOL) if n_calib else None}
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure every model of both targets on the test split; write :data:`OUT`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fe", type=Path, default=ROOT / "checkpoints" / "mp-formation-energy")
    parser.add_argument("--bg", type=Path, default=ROOT / "checkpoints" / "mp-band-gap")
    parser.add_argument("--cgcnn-fe", type=Path, default=ROOT / "runs/mp-cgcnn-formation-energy/checkpoints/best.ckpt")
    parser.add_argument("--cgcnn-bg", type=Path, default=ROOT / "runs/mp-cgcnn-band-gap/checkpoints/best.ckpt")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--targets", default="formation_energy_per_atom,band_gap",
                        help="comma-separated; the others' results in --output are kept")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {}
    earlier = json.loads(args.output.read_text()) if args.output.is_file() else {}
    for key, ours, cgcnn in (("formation_energy_per_atom", args.fe, args.cgcnn_fe),
                             ("band_gap", args.bg, args.cgcnn_bg)):
        if key in args.targets.split(","):
            results[key] = measure(ours, cgcnn, earlier.get(key))
            print(key, {m: r.get("mae") for m, r in results[key]["models"].items()}, flush=True)
            merged = merge_results(args.output, results, {"anchors_not_our_runs": ANCHORS, "alpha": 0.1})
            args.output.with_suffix(".md").write_text(markdown(merged))  # the tables of docs/benchmarks.md
    print(f"wrote {args.output}")
    return 0


def measure(ours: Path, cgcnn: Path, earlier: dict | None = None) -> dict:
    """All models of one target on the shipped model's split (``earlier``: this target's block of a previous run)."""
    from sciml.crystal.task import datamodule
    from sciml.uq.groups import hurdle_members

    predictor = load_module(ours)
    art_cfg = {"data": predictor_data(ours)}
    dm = datamodule(art_cfg)
    zero_inflated = predictor.module.zero_inflated
    y = np.array([float(g.y) for g in dm.datasets["test"]])
    loader = dm.test_dataloader()
    structures = [s for b in loader for s in graph_structures(b)]  # for the calibrator's groups
    runs = {"prdnet (ours)": run_model(predictor.module, loader)}
    if cgcnn.is_file():
        runs["cgcnn"] = run_model(load_module(cgcnn), loader)
    runs["composition (gradient boosting)"] = composition_baseline(dm, zero_inflated)
    train_y = np.array([float(g.y) for g in dm.datasets["train"]])
    runs["train mean"] = {"mean": np.full_like(y, train_y.mean())}
    if zero_inflated:  # the shipped point prediction: inside its interval (HurdleConformal.point)
        p_zero, positive = (torch.as_tensor(runs["prdnet (ours)"][k]) for k in ("p_zero", "positive"))
        groups = hurdle_members(predictor.calibrator, structures)
        runs["prdnet (ours)"]["mean"] = predictor.calibrator.point(p_zero, positive, **groups).numpy()
    models = {}
    for name, r in runs.items():
        models[name] = {"mae": float(np.abs(r["mean"] - y).mean())}
        if zero_inflated:
            models[name]["mae_nonmetal"] = float(np.abs(r["mean"] - y)[y > 0].mean())
            if "p_zero" in r:
                models[name]["roc_auc_metal"] = roc_auc(r["p_zero"], y <= 0)
        if "seconds" in r and name != "composition (gradient boosting)":
            models[name]["structures_per_s"] = len(y) / r["seconds"]
    out = {"n_test": len(y), "split_sizes": dm.split_sizes(), "models": models}
    if "cgcnn" not in runs:  # the earlier run's row, beside ours
        out["models"] = {"prdnet (ours)": models.pop("prdnet (ours)"), **earlier_cgcnn(earlier, out), **models}
    out["coverage"] = coverage_report(predictor, dm, runs["prdnet (ours)"], y, zero_inflated, structures)
    out["domain"] = domain_report(predictor, dm)
    return out


def earlier_cgcnn(earlier: dict | None, now: dict) -> dict:
    """The CGCNN row of an earlier run on the same split (same split sizes and test size), labelled; else nothing."""
    same = earlier is not None and all(earlier.get(k) == now[k] for k in ("n_test", "split_sizes"))
    rows = (earlier or {}).get("models", {})
    row = rows.get("cgcnn") or rows.get(EARLIER_CGCNN)
    return {EARLIER_CGCNN: row} if same and row else {}


def non_bulk_structures(elements: set[str]) -> dict:
    """Inputs a bulk-crystal model must flag: a slab, a molecule in a box, a cluster, an element never trained on."""
    from pymatgen.core import Lattice, Molecule, Structure

    salt = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.64), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    frac = salt.frac_coords.copy()
    frac[:, 2] *= 5.64 / (5.64 + 12.0)
    water = Molecule(["O", "H", "H"], [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])
    cluster = Structure(Lattice.cubic(5.64 + 12.0), salt.species, salt.frac_coords * 5.64 / (5.64 + 12.0))
    unseen = next(el for el in ("Ne", "Ar", "Kr", "Xe", "Rn", "Po", "At", "Fr", "Ra", "Ac") if el not in elements)
    rocksalt_unseen = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.64), [unseen, "Cl"],
                                                [[0, 0, 0], [0.5, 0.5, 0.5]])
    return {"NaCl slab, 12 Å vacuum": Structure(Lattice.tetragonal(5.64, 17.64), salt.species, frac),
            "water in a 20 Å box": water.get_boxed_structure(20.0, 20.0, 20.0),
            "NaCl cluster, 12 Å vacuum": cluster,
            f"rock salt {unseen}Cl ({unseen} never in training)": rocksalt_unseen}


def domain_report(predictor, dm) -> dict:
    """Fraction of the test split flagged (p <= β; expected <= β) and the flags of non-bulk inputs."""
    from sciml.crystal.domain import collect
    from sciml.crystal.predict import predict

    beta = predictor.domain.beta
    with torch.no_grad():
        emb = collect(predictor.module, dm.test_dataloader(), predictor.domain.layer)["emb"]
    flagged = float((predictor.domain.pvalue(emb.double()) <= beta).double().mean())
    n = dm.split_sizes()["test"]
    others = non_bulk_structures(set(predictor.elements))
    rows = predict(list(others.values()), model=predictor)
    return {"beta": beta, "test_flagged": flagged, "test_n": n,
            "binomial_tolerance": 3 * (beta * (1 - beta) / n) ** 0.5,
            "non_bulk": {name: {"in_domain": bool(r.in_domain), "note": r.note}
                         for name, r in zip(others, rows.itertuples(), strict=True)}}


def predictor_data(path: Path) -> dict:
    """The ``data`` section the artifact was trained with."""
    import yaml

    return yaml.safe_load((path / "config.yaml").read_text())["data"]


def coverage_report(predictor, dm, run: dict, y: np.ndarray, zero_inflated: bool, structures: list) -> dict:
    """Test coverage of the shipped calibrator per group, beside plain split conformal on the same calib split."""
    from sciml.uq.groups import hurdle_members, predict_interval

    labels = group_labels(structures)
    mean = torch.as_tensor(run["mean"])
    if zero_inflated:
        interval = predictor.calibrator.predict_set(torch.as_tensor(run["p_zero"]), torch.as_tensor(run["positive"]),
                                                    **hurdle_members(predictor.calibrator, structures))
    else:
        interval = predict_interval(predictor.calibrator, mean, torch.ones_like(mean), None, structures)
    covered = interval.contains(torch.as_tensor(y, dtype=interval.lower.dtype)).numpy()
    width, unbounded = bounded_width(interval)
    calib_labels = group_labels([s for b in dm.calib_dataloader() for s in graph_structures(b)])
    report = {"method": predictor.calibrator.method, "overall": float(covered.mean()),
              "mean_width": width, "unbounded": unbounded,
              "groups": group_coverage(covered, labels, calib_labels)}
    if zero_inflated:
        report["metal"], report["nonmetal"] = float(covered[y <= 0].mean()), float(covered[y > 0].mean())
    cal_run = run_model(predictor.module, dm.calib_dataloader())
    cal_y = torch.tensor([float(g.y) for g in dm.datasets["calib"]], dtype=torch.float64)
    split = SplitConformal(alpha=0.1).fit_predictions(torch.as_tensor(cal_run["mean"]), cal_y)
    plain = split.predict_set(mean)
    plain_covered = ((plain.lower.numpy() <= y) & (y <= plain.upper.numpy()))
    report["split_conformal"] = {"overall": float(coverage(plain, torch.as_tensor(y))),
                                 "groups": group_coverage(plain_covered, labels)}
    if zero_inflated:
        report["split_conformal"] |= {"metal": float(plain_covered[y <= 0].mean()),
                                      "nonmetal": float(plain_covered[y > 0].mean())}
    return report


if __name__ == "__main__":
    raise SystemExit(main())
