"""Ensemble size on the mp36k split: MAE of each member and of the mean of the first k, on val and test.

The members are runs of ``configs/crystal/mp-formation-energy.yaml`` (or ``mp-band-gap.yaml``) on one split (seed 42),
trained from their own initialisation or warm-restarted from the shipped model, with other seeds. The mean of the
first ``k`` members is exactly what :class:`sciml.crystal.nn.MeanEnsemble` predicts (the target normalisation is
shared and linear). The ensemble to ship is chosen on **val**; test is reported beside it, never used to choose.
Model-pass time is measured for each member on the test split (one thread count, the same run).

Usage::

    python benchmarks/crystal_mp_ensemble.py --members checkpoints/mp-formation-energy \
        runs/mp-fe-snap1/checkpoints/best.ckpt runs/mp-fe-snap2/checkpoints/best.ckpt [--threads 2]

Writes ``benchmarks/results/crystal_mp_ensemble.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from _results import merge_results
from crystal_mp import load_module, run_model

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "crystal_mp_ensemble.json"


def member_predictions(members: list[Path], dm) -> dict[str, dict]:
    """Per split (val, test): targets ``y`` ``(n,)``, member means ``(M, n)`` and model-pass seconds ``(M,)``."""
    splits = ("val", "test")
    loaders = {split: getattr(dm, f"{split}_dataloader")() for split in splits}
    runs = {split: [] for split in splits}
    for path in members:
        model = load_module(path)  # an artifact's predictor, or a checkpoint's module
        for split in splits:
            runs[split].append(run_model(model.module if path.is_dir() else model, loaders[split]))
    return {split: {"y": np.array([float(g.y) for g in dm.datasets[split]]),
                    "mean": np.stack([r["mean"] for r in runs[split]]),
                    "seconds": np.array([r["seconds"] for r in runs[split]])} for split in splits}


def mae(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute error of ``pred`` against ``y``, both ``(n,)``."""
    return float(np.abs(pred - y).mean())


def size_curve(preds: dict[str, dict]) -> list[dict]:
    """MAE of the mean of the first ``k`` members, ``k = 1..M``, on val and test."""
    rows = []
    for k in range(1, len(preds["val"]["mean"]) + 1):
        row = {"k": k}
        for split, p in preds.items():
            row[f"{split}_mae"] = mae(p["mean"][:k].mean(0), p["y"])
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure the members and their prefix means; write :data:`OUT` under the target's name."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=Path, nargs="+", required=True,
                        help="the first is an artifact folder (its data section names the data and split)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from crystal_mp import predictor_data

    from sciml.crystal.task import datamodule

    data = predictor_data(args.members[0])
    dm = datamodule({"data": data})
    preds = member_predictions(args.members, dm)
    members = [{"source": str(path), **{f"{split}_mae": mae(p["mean"][m], p["y"]) for split, p in preds.items()},
                "test_structures_per_s": len(preds["test"]["y"]) / float(preds["test"]["seconds"][m])}
               for m, path in enumerate(args.members)]
    curve = size_curve(preds)
    best = min(curve, key=lambda row: row["val_mae"])
    result = {data["target"]: {"split_sizes": dm.split_sizes(), "threads": args.threads, "members": members,
                               "mean_of_first_k": curve, "chosen_on_val": best["k"]}}
    for row in curve:
        print(row, flush=True)
    merge_results(args.output, result)
    print(f"chosen on val: the mean of the first {best['k']}; wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
