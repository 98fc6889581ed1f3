"""Benchmark single-cell perturbation models: our flow model beside every baseline, same split, same run.

Cases
-----
* ``grn`` (≥ 3 seeds): the simulator's default screen (``configs/data/grn_default.yaml``) with the seed as data,
  split and model seed; split ``combo_seen2`` (every single in training, held-out doubles). Reported per split
  category and on the interaction-bearing doubles (‖ε_ab‖ above the noise floor, from the ground truth).
* ``norman_additive``: Norman 2019 part of ``perturbench_devel.h5ad``, doubles with both singles seen.
* ``norman_unseen_single``: the same file, held-out single genes.

Models: ``no_change``, ``train_mean``, ``additive``, ``linear`` (:mod:`sciml.perturbation.baselines.simple`), the learned
per-gene ``combination`` rule (:mod:`sciml.perturbation.baselines.combination`), our ``flow`` (the config's prior), with
``--ablation`` also ``flow_additive_prior`` (the earlier model: ``model.flow.prior: additive``, free mean
remainder ``remainder_mean: 1``), and
the ``noise_ceiling`` (half of the real cells predicting the other half). Metrics: all of
:mod:`sciml.perturbation.metrics` per condition, their means per category, train time (s), cells generated per second
(ODE sampling, one thread), and the coverage of the conformal effect bands: on the test conditions, and averaged
over 500 random re-splits of the pooled calibration + test conditions (the usual estimate of conformal coverage
with few conditions). Writes ``benchmarks/results/perturbation.json``.

Usage::

    python benchmarks/perturbation.py [--seeds 0 1 2] [--threads 1] [--no-norman] [--ablation] [--epochs N]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sciml.perturbation.data.anndata_io import read_h5ad, write_h5ad
from sciml.perturbation.baselines.simple import BASELINES
from sciml.perturbation.compare import evaluate_baselines
from sciml.perturbation.metrics import evaluate, summarise
from sciml.perturbation.sim.simulate import read_ground_truth, simulate
from sciml.cli.config import apply_overrides, load_config
from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.evaluate import band_metrics, effects, split_predictions
from sciml.perturbation.uncertainty import EffectBands
from sciml.core.registry import build_datamodule
from sciml.core.train import train

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["pearson_delta", "pearson_delta_de", "mse", "mae", "mse_de", "de_overlap", "discrimination", "energy",
           "mmd", "interaction_pearson"]
HEADLINE = ["pearson_delta", "mse", "energy"]
BASELINE_NAMES = (*BASELINES, "combination")
ABLATION = {"flow_additive_prior": ["--model.flow.prior", "additive", "--model.flow.remainder_mean", "1.0"]}


def pooled_coverage(bands: EffectBands, cal: tuple, test: tuple, alpha: float, reps: int = 500, seed: int = 0) -> dict:
    """Coverage of the box over random re-splits of the pooled calib + test conditions (same sizes)."""
    pred, true = torch.cat([cal[0], test[0]]), torch.cat([cal[1], test[1]])
    n_cal = len(cal[0])
    scores = bands.score.score(pred, true)
    rng = np.random.default_rng(seed)
    hits = []
    for _ in range(reps):
        perm = rng.permutation(len(pred))
        q = bands.calibrator.__class__(alpha=alpha).fit(scores[perm[:n_cal]]).threshold()
        hits.append(float((scores[perm[n_cal:]] <= q).double().mean()))
    return {"coverage_simultaneous_resplit": float(np.mean(hits)), "reps": reps}


def train_flow(cfg: dict, run_dir: Path) -> tuple[PerturbationFlow, float]:
    """Fit the flow model of ``cfg`` in a fresh run folder; return the best checkpoint's module and seconds."""
    cfg = copy.deepcopy(cfg) | {"run_dir": str(run_dir)}
    start = time.perf_counter()
    metrics = train(cfg, test=False)
    seconds = time.perf_counter() - start
    state = load_lightning_checkpoint(metrics["best_checkpoint"])
    module = PerturbationFlow(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    return module.eval(), seconds


def run_case(name: str, cfg: dict, run_dir: Path, n_cells: int, alpha: float, truth: dict | None,
             variants: dict[str, list[str]] | None = None) -> dict:
    """Train, predict and evaluate one case; baselines and noise ceiling on the same data module.

    ``variants``: extra flow models ``{label: config overrides}`` trained and evaluated on the same split
    (ablations; bands and timings are those of the main model).
    """
    seed = int(cfg.get("seed", 0))
    module, train_s = train_flow(cfg, run_dir)
    dm = build_datamodule(cfg, None)
    start = time.perf_counter()
    test_cells = split_predictions(module, dm, "test", n_cells, seed)
    gen_s = time.perf_counter() - start
    frames = [evaluate_baselines(dm, "test", n_cells=n_cells, seed=seed, truth=truth, names=BASELINE_NAMES),
              evaluate(test_cells, dm, "test", seed, truth=truth).assign(model="flow")]
    for label, overrides in (variants or {}).items():
        var_cfg = apply_overrides(copy.deepcopy(cfg), overrides)
        var_module, _ = train_flow(var_cfg, run_dir.with_name(f"{run_dir.name}_{label}"))
        cells = split_predictions(var_module, dm, "test", n_cells, seed)
        frames.append(evaluate(cells, dm, "test", seed, truth=truth).assign(model=label))
    table = pd.concat(frames, ignore_index=True)
    fit = effects(split_predictions(module, dm, "val", n_cells, seed), dm)
    cal = effects(split_predictions(module, dm, "calib", n_cells, seed), dm)
    test = effects(test_cells, dm)
    bands = EffectBands.fit(*fit, *cal, alpha=alpha)
    result = {"case": name, "seed": seed, "split": dm.split["kind"], "n_genes": len(dm.genes),
              "conditions": {k: len(v) for k, v in dm.conditions.items()}, "train_seconds": train_s,
              "cells_per_second": len(test_cells) * n_cells / gen_s, "n_cells": n_cells,
              "bands": band_metrics(bands, *test) | pooled_coverage(bands, cal, test, alpha) | {"alpha": alpha},
              "per_condition": table.replace({np.nan: None}).to_dict("records"), "summary": {}}
    for model, rows in table.groupby("model"):
        result["summary"][model] = summarise(rows)[METRICS].replace({np.nan: None}).to_dict("index")
        if "interacting" in rows and rows["interacting"].fillna(False).astype(bool).any():
            inter = rows[rows["interacting"].fillna(False).astype(bool)][METRICS].mean()
            result["summary"][model]["interacting_doubles"] = inter.replace({np.nan: None}).to_dict()
    return result


def grn_case(seed: int, base: dict, data_cfg: dict, work: Path, n_cells: int, alpha: float,
             variants: dict[str, list[str]] | None = None) -> dict:
    """Simulate the default screen with ``seed`` and run the case on it."""
    path = work / f"grn_seed{seed}.h5ad"
    write_h5ad(simulate(data_cfg | {"seed": seed}), path)
    cfg = copy.deepcopy(base)
    cfg["seed"] = seed
    cfg["data"] |= {"path": str(path), "split": cfg["data"]["split"] | {"seed": seed}}
    out = run_case("grn", cfg, work / f"grn_seed{seed}", n_cells, alpha, read_ground_truth(read_h5ad(path)), variants)
    out["fraction_interacting"] = read_ground_truth(read_h5ad(path))["fraction_interacting"]
    return out


def verdict(grn: list[dict]) -> dict:
    """Whether each flow model beats additive, linear and combination on the interaction-bearing doubles, per seed.

    Keys ``seed<k>`` (the main ``flow`` model) and ``seed<k>/<variant>`` (ablations).
    """
    out = {}
    for r in grn:
        s = r["summary"]
        for model in [m for m in s if m.startswith("flow")]:
            ours = s[model].get("interacting_doubles", {})
            row = {}
            for base in ("additive", "linear", "combination"):
                theirs = s.get(base, {}).get("interacting_doubles", {})
                if ours and theirs:
                    row[base] = {"pearson_delta": ours["pearson_delta"] > theirs["pearson_delta"],
                                 "mse": ours["mse"] < theirs["mse"], "energy": ours["energy"] < theirs["energy"]}
            out[f"seed{r['seed']}" + ("" if model == "flow" else f"/{model}")] = row
    return out


def print_case(r: dict) -> None:
    """Table of the headline metrics (all test conditions, and interaction-bearing doubles if any)."""
    print(f"\n== {r['case']} seed {r['seed']} ({r['split']}, {r['conditions']}) train {r['train_seconds']:.0f} s, "
          f"{r['cells_per_second']:.0f} cells/s; bands: {r['bands']}")
    rows = {m: {k: v["all"][k] for k in METRICS} for m, v in r["summary"].items()}
    print(pd.DataFrame(rows).T.round(4).to_string())
    inter = {m: v["interacting_doubles"] for m, v in r["summary"].items() if "interacting_doubles" in v}
    if inter:
        print("interaction-bearing doubles:")
        print(pd.DataFrame(inter).T[HEADLINE + ["interaction_pearson"]].round(4).to_string())


def main(argv: list[str] | None = None) -> int:
    """Run the cases and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="override data.steps_per_epoch (smoke runs)")
    p.add_argument("--n-cells", type=int, default=200, help="generated cells per test condition")
    p.add_argument("--no-norman", action="store_true")
    p.add_argument("--ablation", action="store_true", help="also train flow_additive_prior on the simulator seeds")
    p.add_argument("--set", nargs="*", default=[], help="config overrides for every case, e.g. --set "
                   "--model.flow.prior_dropout 0 (after --set, as in `sciml fit`)")
    p.add_argument("--work", default="benchmarks/runs/perturbation")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "perturbation.json"))
    args, extra = p.parse_known_args(argv)
    args.set = args.set + extra
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    grn_cfg = load_config(ROOT / "configs" / "perturbation" / "grn_default.yaml")
    norman_cfg = load_config(ROOT / "configs" / "perturbation" / "norman_devel.yaml")
    for cfg in (grn_cfg, norman_cfg):
        apply_overrides(cfg, args.set)
        cfg["threads"] = args.threads
        if args.epochs:
            cfg["trainer"]["max_epochs"] = args.epochs
        if args.steps_per_epoch:
            cfg["data"]["steps_per_epoch"] = args.steps_per_epoch
    sim_cfg = load_config(ROOT / "configs" / "data" / "grn_default.yaml")["grn"]
    alpha = float(grn_cfg["calibration"]["alpha"])
    results = {"threads": args.threads, "torch": torch.__version__, "alpha": alpha, "grn": [], "norman": []}
    for seed in args.seeds:
        results["grn"].append(grn_case(seed, grn_cfg, sim_cfg, work, args.n_cells, alpha,
                                       ABLATION if args.ablation else None))
        print_case(results["grn"][-1])
        results["verdict_grn"] = verdict(results["grn"])
        atomic_write_text(args.output, json.dumps(results, indent=1, default=float))  # partial results
    if not args.no_norman and Path(norman_cfg["data"]["path"]).exists():
        for kind in ("additive", "unseen_single"):
            cfg = copy.deepcopy(norman_cfg)
            cfg["data"]["split"]["kind"] = kind
            r = run_case(f"norman_{kind}", cfg, work / f"norman_{kind}", args.n_cells, alpha, None)
            results["norman"].append(r)
            print_case(r)
    atomic_write_text(args.output, json.dumps(results, indent=1, default=float))
    print(f"\nverdict (flow better than baseline on interaction-bearing doubles): {results['verdict_grn']}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
