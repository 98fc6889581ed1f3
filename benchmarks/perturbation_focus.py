"""What generating only each condition's most affected genes with the network costs in accuracy, and what it saves.

At prediction the flow network generates, per condition, the ``flow.predict_genes`` genes with the largest prior mean
effect; every other gene moves by its prior mean (:meth:`sciml.perturbation.model.PerturbationModel.focus`). This
script generates the held-out test doubles of a trained run once per setting of ``predict_genes`` (``all`` = the
whole panel through the network) from the same control cells and noise, and scores each against the measured cells:

- ``mse``: mean squared error of the mean effect over genes (log1p units);
- ``energy``: energy distance between 300 generated and 300 measured cells (all genes; Székely & Rizzo 2013);
- ``sd_error``: mean absolute error of the per-gene standard deviation across cells;
- ``s_per_condition``, ``cpu_s_per_condition``: wall and CPU seconds to generate one condition of ``--cells`` cells
  (``--threads`` torch threads, one by default), side by side.

The model is the 1,000-gene accuracy run of ``benchmarks/perturbation_scale.py --accuracy 1000`` (its checkpoint,
split and screen) unless ``--run`` / ``--screen`` name another, or ``--model`` names an artifact (its test doubles
are those of its recorded split, recomputed on ``--screen``). Each run writes its case (``--case``) into the results
file, keeping the other cases.

Usage::

    nice -n 10 python benchmarks/perturbation_focus.py [--genes 128 256 512 all] [--conditions 20]
    sciml data grn --config configs/data/grn_default.yaml --output runs/data/grn_default.h5ad
    nice -n 10 python benchmarks/perturbation_focus.py --case grn_default --model grn-default \
        --screen runs/data/grn_default.h5ad --genes 25 50 all
    python benchmarks/perturbation_focus.py --case threads_2 --threads 2 --genes 128 --conditions 5   # threads
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import merge_results  # noqa: E402  (benchmarks/_results.py: atomic writes)

RUN = ROOT / "benchmarks/runs/perturbation_scale/accuracy_1000"


def energy_distance(x: np.ndarray, y: np.ndarray) -> float:
    """``2E|X−Y| − E|X−X'| − E|Y−Y'|`` of two samples ``(n, G)`` (V-statistic, Euclidean)."""
    def mean_dist(u: np.ndarray, v: np.ndarray) -> float:
        sq = (u * u).sum(1)[:, None] + (v * v).sum(1)[None] - 2 * u @ v.T
        return float(np.sqrt(np.clip(sq, 0, None)).mean())
    return 2 * mean_dist(x, y) - mean_dist(x, x) - mean_dist(y, y)


def measured_cells(screen, labels: list[str], genes: list[str], key: str) -> dict[str, np.ndarray]:
    """Measured cells ``(n, G)`` per condition label, columns in ``genes`` order."""
    import scipy.sparse as sp

    cond = screen.obs[key].astype(str).to_numpy()
    cols = screen.var_names.get_indexer(genes)
    out = {}
    for label in labels:
        x = screen[np.flatnonzero(cond == label)].X
        out[label] = (x.toarray() if sp.issparse(x) else np.asarray(x))[:, cols].astype(np.float64)
    return out


def load(args) -> tuple:
    """``(model, test labels)`` of ``--model`` (artifact, split recomputed on ``--screen``) or of ``--run``."""
    import anndata as ad
    import torch

    from sciml.perturbation.artifact import load_model
    from sciml.perturbation.data.conditions import parse_condition
    from sciml.perturbation.data.splits import make_split
    from sciml.perturbation.module import PerturbationFlow

    if args.model:
        predictor = load_model(args.model)
        labels = ad.read_h5ad(args.screen, backed="r").obs[args.condition_key].astype(str).unique()
        conditions = {label: parse_condition(label) for label in labels}
        split = make_split({k: v for k, v in conditions.items() if v}, **predictor.data["split"])
        return predictor.module, sorted(split["test"])
    state = torch.load(Path(args.run) / "checkpoints/best.ckpt", weights_only=False, map_location="cpu")  # own run
    model = PerturbationFlow(**state["hyper_parameters"])
    model.load_state_dict(state["state_dict"])
    return model, json.loads((Path(args.run) / "split.json").read_text())["test"]


def main(argv: list[str] | None = None) -> int:
    """Generate the test doubles once per ``--genes`` setting and score each; write ``--output``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", default="grn_1000")
    p.add_argument("--run", default=str(RUN / "run"), help="run folder (checkpoints/best.ckpt, split.json)")
    p.add_argument("--model", default=None, help="an artifact (name or folder) instead of --run")
    p.add_argument("--screen", default=str(RUN / "screen.h5ad"))
    p.add_argument("--genes", nargs="+", default=["128", "256", "512", "all"])
    p.add_argument("--conditions", type=int, default=20, help="test doubles scored (the first of the split)")
    p.add_argument("--cells", type=int, default=300)
    p.add_argument("--condition-key", default="condition")
    p.add_argument("--threads", type=int, default=1, help="torch threads while generating")
    p.add_argument("--output", default=str(ROOT / "benchmarks/results/perturbation_focus.json"))
    args = p.parse_args(argv)

    import anndata as ad
    import torch

    from sciml.perturbation.data.conditions import gene_indices, parse_condition
    from sciml.perturbation.data.table import read_control_cells
    from sciml.perturbation.predict import generate

    torch.set_num_threads(args.threads)
    model, labels = load(args)
    model.eval()
    labels = labels[: args.conditions]
    ctrl = read_control_cells(args.screen, model.measured_genes)
    index = {g: i for i, g in enumerate(model.config["genes"])}
    rows = [gene_indices(parse_condition(label), index) for label in labels]
    truth = measured_cells(ad.read_h5ad(args.screen, backed="r"), labels, model.measured_genes, args.condition_key)
    with torch.no_grad():
        model.prior_tables()
    results = {}
    for setting in args.genes:
        model.set_flow(predict_genes=None if setting == "all" else int(setting))
        start, cpu = time.perf_counter(), time.process_time()
        cells = generate(model, ctrl, rows, args.cells, seed=0)
        seconds, cpu_seconds = (time.perf_counter() - start) / len(rows), (time.process_time() - cpu) / len(rows)
        per = [{"mse": float(((c.mean(0) - truth[label].mean(0)) ** 2).mean()),
                "energy": energy_distance(c.astype(np.float64), truth[label]),
                "sd_error": float(np.abs(c.std(0) - truth[label].std(0)).mean())}
               for c, label in zip(cells, labels, strict=True)]
        results[setting] = {k: float(np.mean([r[k] for r in per])) for k in per[0]} | {"s_per_condition": seconds,
                                                                                     "cpu_s_per_condition": cpu_seconds}
        print(setting, json.dumps(results[setting]), flush=True)
    case = {"model": args.model or str(args.run), "screen": str(args.screen), "genes": len(model.measured_genes),
            "threads": args.threads,
            "conditions": labels, "cells": args.cells, "predict_genes": results}
    merge_results(args.output, {args.case: case}, header={"benchmark": "perturbation_focus", "torch": torch.__version__,
                                                           "machine": platform.platform()},
                  section="cases")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
