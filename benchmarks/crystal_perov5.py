"""Benchmark the crystal family on perov5 (heat_all, eV per 5-atom cell), all models on one seeded split.

Models, trained and measured in this one run on the same train/val/calib/test split:
our PRDNet-style model, the same without the diffraction branch (ablation), a CGCNN-style baseline (PyG
``CGConv``), a composition-only baseline (element fractions + scikit-learn random forest) and the mean
predictor. Reports test MAE, train time, inference structures/s, and coverage / mean width of split-conformal
90% intervals fitted on the calib split. Writes ``benchmarks/results/crystal_perov5.json``.

Usage::

    python benchmarks/crystal_perov5.py [--epochs 150] [--threads 2] [--data PATH] [--seeds 0,1]

Seeds can run as parallel processes (``--seeds 0 --output a.json`` and ``--seeds 1 --output b.json``, same split)
and be combined with ``python benchmarks/crystal_perov5.py --merge a.json b.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from sciml.cli.config import load_config
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.train import train
from sciml.core.training.conformal import collect_predictions
from sciml.crystal.module import CrystalRegressor
from sciml.crystal.task import datamodule as crystal_datamodule
from sciml.uq import SplitConformal, coverage, mean_width

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # network settings on top of the config's (prdnet) network; cgcnn keeps only what it accepts
    "prdnet": {"name": "prdnet", "diffraction": True},
    "prdnet_no_diffraction": {"name": "prdnet", "diffraction": False},
    "cgcnn": {"name": "cgcnn"},
}
CGCNN_KEYS = ("name", "dim", "n_layers", "n_rbf")


def interval_metrics(calib: tuple, test: tuple, alpha: float) -> dict:
    """Split-conformal (normalised by n_atoms) coverage and mean width on test, fitted on calib."""
    (pc, sc, yc), (pt, st, yt) = calib, test
    cal = SplitConformal(score="normalized", alpha=alpha).fit_predictions(pc, yc, sc)
    interval = cal.predict_set(pt, sigma=st)
    return {"coverage": float(coverage(interval, yt)), "mean_width": float(mean_width(interval))}


def as_double(*tensors):
    """Cast to float64."""
    return tuple(t.double() for t in tensors)


def neural(name: str, cfg: dict, dm, alpha: float, seed: int) -> dict:
    """Train one network variant (fresh run folder, model seed ``seed``) and measure it."""
    cfg = copy.deepcopy(cfg)
    network = cfg["model"]["network"] | VARIANTS[name]
    if network["name"] == "cgcnn":
        network = {k: v for k, v in network.items() if k in CGCNN_KEYS}
    cfg["model"]["network"], cfg["seed"] = network, seed
    run_dir = ROOT / "benchmarks" / "runs" / f"{name}-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg["run_dir"] = str(run_dir)
    start = time.perf_counter()
    result = train(cfg, ckpt_path=None, test=False)
    train_s = time.perf_counter() - start
    state = load_lightning_checkpoint(result["best_checkpoint"])
    module = CrystalRegressor(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"])
    start = time.perf_counter()
    pt, st, yt = as_double(*collect_predictions(module, dm.test_dataloader()))
    infer_s = time.perf_counter() - start
    pc, sc, yc = as_double(*collect_predictions(module, dm.calib_dataloader()))
    pv, _, yv = as_double(*collect_predictions(module, dm.val_dataloader()))
    return {"test_mae": float((pt - yt).abs().mean()), "val_mae": float((pv - yv).abs().mean()), "train_s": train_s,
            "structures_per_s": len(yt) / infer_s, "epochs": cfg["trainer"]["max_epochs"],
            **interval_metrics((pc, sc, yc), (pt, st, yt), alpha), "test_abs_error": abs_errors(pt, yt)}


def abs_errors(prediction, target) -> list[float]:
    """Per-structure absolute test errors in split order (eV/cell, 6 decimals), for paired comparisons."""
    return [round(float(v), 6) for v in np.abs(np.asarray(prediction) - np.asarray(target))]


def paired_difference(ours: dict, other: dict, n_boot: int = 2000, seed: int = 0) -> dict:
    """Test-MAE difference ``ours − other`` with a paired bootstrap 95% interval over test structures.

    Each model's per-structure absolute error is first averaged over its seeds; the bootstrap resamples
    test structures (the split's sampling noise, which seeds alone do not show).
    """
    def seed_mean(r):
        return np.mean([run["test_abs_error"] for run in seed_runs(r)], axis=0)

    d = seed_mean(ours) - seed_mean(other)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    low, high = np.quantile(d[idx].mean(1), [0.025, 0.975])
    return {"difference": float(d.mean()), "ci95": [float(low), float(high)],
            "relative": float(d.mean() / seed_mean(other).mean())}


def seed_runs(result: dict) -> list[dict]:
    """The per-seed runs of a neural result, or the (deterministic) classical result as its one run."""
    return result.get("per_seed", [result])


def comparisons(results: dict, ours: str = "prdnet") -> dict:
    """Paired differences of our model against every other model present (with per-structure errors)."""
    if ours not in results or "test_abs_error" not in seed_runs(results[ours])[0]:
        return {}
    return {f"{ours} - {name}": paired_difference(results[ours], r) for name, r in results.items()
            if name != ours and "test_abs_error" in seed_runs(r)[0]}


def summarise(runs: list[dict]) -> dict:
    """Mean over seeds of each metric, plus the standard deviation of the test MAE."""
    keys = ("test_mae", "val_mae", "train_s", "structures_per_s", "coverage", "mean_width")
    out = {k: float(np.mean([r[k] for r in runs])) for k in keys}
    out["test_mae_std"] = float(np.std([r["test_mae"] for r in runs]))
    out["epochs"] = runs[0]["epochs"]
    return out


def composition_features(graphs) -> np.ndarray:
    """Element-fraction vectors over Z = 1..103, shape (n, 103)."""
    x = np.zeros((len(graphs), 103))
    for i, g in enumerate(graphs):
        z, counts = np.unique(g.z.numpy(), return_counts=True)
        x[i, z - 1] = counts / counts.sum()
    return x


def split_arrays(graphs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, per-cell targets and atom counts of a list of graphs."""
    return (composition_features(graphs), np.array([float(g.y) for g in graphs]),
            np.array([int(g.n_atoms) for g in graphs], dtype=float))


def classical(dm, alpha: float, threads: int) -> dict:
    """Composition-only random forest and the mean predictor, on per-atom targets scaled back per cell."""
    from sklearn.ensemble import RandomForestRegressor

    (xt, yt, nt), (xc, yc, nc), (xs, ys, ns) = (split_arrays(dm.datasets[k]) for k in ("train", "calib", "test"))
    out = {}
    rf = RandomForestRegressor(n_estimators=300, min_samples_leaf=2, random_state=0, n_jobs=threads)
    start = time.perf_counter()
    rf.fit(xt, yt / nt)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    ps = rf.predict(xs) * ns
    infer_s = time.perf_counter() - start
    pc = rf.predict(xc) * nc
    for name, p_test, p_cal, t_s, i_s in (
        ("composition_rf", ps, pc, train_s, infer_s),
        ("mean", np.full_like(ys, (yt / nt).mean()) * ns, np.full_like(yc, (yt / nt).mean()) * nc, 0.0, None),
    ):
        tens = [torch.as_tensor(a, dtype=torch.float64) for a in (p_cal, nc, yc, p_test, ns, ys)]
        out[name] = {"test_mae": float(np.abs(p_test - ys).mean()), "train_s": t_s,
                     "structures_per_s": len(ys) / i_s if i_s else None,
                     **interval_metrics(tuple(tens[:3]), tuple(tens[3:]), alpha),
                     "test_abs_error": abs_errors(p_test, ys)}
    return out


def table(results: dict) -> str:
    """Markdown table of the results (also pasted into the README)."""
    lines = ["| model | test MAE (eV/cell) | val MAE | train time (s) | inference (structures/s) | 90% coverage | "
             "mean width (eV/cell) |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        mae = f"{r['test_mae']:.4f}" + (f" ± {r['test_mae_std']:.4f}" if "test_mae_std" in r else "")
        val = f"{r['val_mae']:.4f}" if "val_mae" in r else "-"
        sps = f"{r['structures_per_s']:.0f}" if r["structures_per_s"] else "-"
        lines.append(f"| {name} | {mae} | {val} | {r['train_s']:.0f} | {sps} | {r['coverage']:.3f} | "
                     f"{r['mean_width']:.3f} |")
    return "\n".join(lines)


def comparison_table(pairs: dict) -> str:
    """Markdown table of the paired test-MAE differences."""
    lines = ["| comparison | Δ test MAE (eV/cell) | 95% CI (paired bootstrap) | relative |", "|---|---|---|---|"]
    for name, c in pairs.items():
        low, high = c["ci95"]
        lines.append(f"| {name} | {c['difference']:+.4f} | [{low:+.4f}, {high:+.4f}] | {c['relative']:+.1%} |")
    return "\n".join(lines)


def merge(paths: list[str], output: str) -> None:
    """Combine result files of one split run with different model seeds or models (per-seed runs concatenated)."""
    payloads = [json.loads(Path(p).read_text()) for p in paths]
    first = payloads[0]
    for p, other in zip(paths[1:], payloads[1:], strict=True):
        if (other["dataset"], other["split_seed"], other["split_sizes"]) != (first["dataset"], first["split_seed"],
                                                                           first["split_sizes"]):
            raise SystemExit(f"error: {p} was run on a different split than {paths[0]}; merge runs of one split only")
    results = {}
    for other in payloads:  # models in first-seen order; classical baselines (deterministic) from the first file
        for name, r in other["results"].items():
            if "per_seed" not in r:
                results.setdefault(name, r)
                continue
            runs = results.get(name, {}).get("per_seed", []) + r["per_seed"]
            seeds = results.get(name, {}).get("seeds", []) + r["seeds"]
            results[name] = summarise(runs) | {"seeds": seeds, "per_seed": runs}
    pairs = comparisons(results)
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
    write_json(output, first | {"results": results, "comparisons": pairs})
    print(table(results))
    print(comparison_table(pairs))
    print(f"wrote {output}")


def main() -> None:
    """Run every model on one split and write the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "crystal" / "perov5.yaml"))
    parser.add_argument("--data", default=None, help="override data.path")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--models", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="0", help="model seeds (comma-separated); the split is fixed")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "crystal_perov5.json"))
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="combine per-seed result files into --output")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.output)
    cfg = load_config(args.config)
    cfg["threads"] = args.threads
    if args.data:
        cfg["data"]["path"] = args.data
    if args.epochs:
        cfg["trainer"]["max_epochs"] = args.epochs
    cfg["trainer"]["enable_progress_bar"] = False
    torch.set_num_threads(args.threads)
    dm = crystal_datamodule(cfg)
    results = classical(dm, args.alpha, args.threads)
    seeds = [int(v) for v in args.seeds.split(",")]
    for name in args.models.split(","):
        runs = [neural(name, cfg, dm, args.alpha, seed) for seed in seeds]
        results[name] = summarise(runs) | {"seeds": seeds, "per_seed": runs}
        print(name, json.dumps(results[name]), flush=True)
    payload = {"dataset": cfg["data"]["path"], "target": f"{cfg['data']['target']} ({cfg['data']['unit']})",
               "split_sizes": dm.split_sizes(), "split_seed": cfg["data"]["split"]["seed"], "alpha": args.alpha,
               "threads": args.threads, "torch": torch.__version__, "results": results,
               "comparisons": comparisons(results)}
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
    write_json(args.output, payload)  # once, at the end: an interrupted run leaves the file as it was
    print(table(results))
    print(comparison_table(payload["comparisons"]))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
