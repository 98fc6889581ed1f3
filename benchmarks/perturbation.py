"""Benchmark single-cell perturbation models: our flow model beside every baseline, same split, same run.

Cases
-----
* ``grn/<setting>`` (≥ 3 seeds each): simulated screens of ``configs/data/grn_<setting>.yaml`` (``default``,
  ``cooperative``: AND/OR terms with Hill n = 4 under activation, ``noisy``: incomplete variable knockdown, few
  interacting pairs, zero inflation, batches) with the seed as data, split and model seed; split ``combo_seen2``
  (every single in training, held-out doubles). Reported per condition (every held-out double), per split category
  and on the interaction-bearing doubles (‖ε_ab‖ above the noise floor, from the ground truth).
* ``norman_additive`` / ``norman_unseen_single``: Norman 2019 part of ``perturbench_devel.h5ad``.
* ``mcfaline_cell_line``: McFaline 2023 part of the same file, cell-line transfer (A172 held out).
  Real cases are skipped, with a note in the JSON, when the file is absent.

Models: ``no_change``, ``train_mean``, ``additive``, ``linear`` (:mod:`sciml.perturbation.baselines.simple`; their
cells are drawn control cells shifted by the predicted effect), ``additive_mean`` (the additive baseline's exact mean,
no draw: the bar of a fallen-back model, and of Norman's ``done_when`` together with ``additive``), the
learned per-gene ``combination`` rule (:mod:`sciml.perturbation.baselines.combination`), our ``flow`` (config recipe:
masking prior, κ and τ chosen on the training + val doubles, generated mean = prior mean; then the additive fallback
when it does not beat additive on val — the same steps as ``sciml export``), and the ``noise_ceiling`` (half of the
real cells predicting the other half).
Per case: all metrics of :mod:`sciml.perturbation.metrics` per condition; cell-eval's metrics (the Virtual Cell
Challenge's suite, :mod:`sciml.perturbation.celleval`: perturbation discrimination, DE overlap and precision, DE
direction agreement, Pearson of deltas, MAE...) of the flow model and of every baseline with cells (``no_change``,
``train_mean``, ``additive``, ``linear``, ``combination``), each scored on the same test cells and control cells
(``cell_eval`` in the JSON: means per model and rows per condition; skipped with a note when cell-eval is not
installed, ``pip install "sciml[eval]"``, or with ``--no-cell-eval``); the flow/additive MSE ratio of every
held-out double and the worst one, the share of negative generated values, the val check, κ and τ, under the fallback
the largest gap between the generated mean and the additive baseline's (``fallback_gap_to_additive``), train time,
cells generated per second, and the coverage of the conformal effect bands (on the test conditions, and averaged
over 500 random re-splits of the pooled calibration + test conditions). With ``--speed`` (first simulator case):
today's sampler (10 RK4 steps, one condition per call, everything recomputed at every step) side by side with
the fast one (Euler steps on the straight path, conditions batched, the step-independent context cached) on val and
test: metrics vs steps and cells per second.

Results are written once, when every case of the run is done, atomically (``benchmarks/_results.py``): an
interrupted or failed run leaves ``--output`` as it was. A run's cases are merged into an existing ``--output`` by
case (``grn/<setting>`` and seed, or the real case): the cases it computed replace theirs, the others stay
(``--fresh``: write this run's cases alone).

Usage::

    python benchmarks/perturbation.py [--settings default cooperative noisy] [--seeds 0 1 2] [--threads 1]
        [--no-real] [--no-sim] [--real norman_additive norman_unseen_single mcfaline_cell_line] [--speed]
        [--epochs N] [--work DIR] [--output PATH] [--fresh] [--no-cell-eval]
    python benchmarks/perturbation.py --merge a.json b.json --output benchmarks/results/perturbation.json

A case whose run folder under ``--work`` already holds a ``last.ckpt`` resumes it (a finished training only
reloads its best checkpoint; ``resumed_checkpoint`` says so and ``train_seconds`` is then not a training time).
``--merge`` combines the results files of complete runs (e.g. simulator and real data in two processes), later
files winning for a case both hold.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sciml.cli.config import apply_overrides, load_config
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.registry import build_datamodule
from sciml.core.train import train
from sciml.perturbation.baselines.simple import BASELINES, fit_baselines
from sciml.perturbation.compare import evaluate_baselines
from sciml.perturbation.data.anndata_io import write_h5ad
from sciml.perturbation.evaluate import band_metrics, effects, split_predictions
from sciml.perturbation.metrics import baseline_predictions, evaluate, summarise
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn import integrate
from sciml.perturbation.predict import draw_controls
from sciml.perturbation.select import apply_fallback, versus_additive
from sciml.perturbation.sim.simulate import read_ground_truth, simulate
from sciml.perturbation.uncertainty import EffectBands

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402  (benchmarks/_results.py: complete runs only, atomic)

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["pearson_delta", "pearson_delta_de", "mse", "mae", "mse_de", "de_overlap", "discrimination", "energy",
           "mmd", "interaction_pearson"]
HEADLINE = ["pearson_delta", "mse", "energy"]
BASELINE_NAMES = (*BASELINES, "combination")
SETTINGS = ("default", "cooperative", "noisy")
OTHER = tuple(sorted(p.stem[4:] for p in (ROOT / "configs" / "data").glob("grn_*.yaml") if p.stem[4:] not in SETTINGS))
REAL = {"norman_additive": ("norman", {"kind": "additive"}),
        "norman_unseen_single": ("norman", {"kind": "unseen_single"}),
        "mcfaline_cell_line": ("mcfaline", {})}
SPEED_STEPS = (("euler", 1), ("euler", 2), ("euler", 4), ("euler", 8), ("rk4", 10))
CELL_EVAL_HEADLINE = ["discrimination_score_l1", "overlap_at_N", "precision_at_N", "de_direction_match",
                      "de_spearman_lfc_sig", "pearson_delta", "mae"]


def cell_eval_available() -> bool:
    """Whether cell-eval (``pip install "sciml[eval]"``) can be imported."""
    try:
        import cell_eval  # noqa: F401
    except ImportError:
        return False
    return True


def cell_eval_case(flow_cells: dict, dm, n_cells: int, seed: int, threads: int) -> dict:
    """cell-eval's metrics of the flow model and of every baseline with cells, on the test split.

    The baselines' cells are those their rows of :func:`evaluate_baselines` were computed on (same fit, same draw of
    control cells); every model is scored against the same real cells and control cells.
    """
    from sciml.perturbation.celleval import score_split

    start = time.perf_counter()
    cells = {name: baseline_predictions(model, dm, "test", n_cells, seed)
             for name, model in fit_baselines(dm, BASELINE_NAMES).items()} | {"flow": flow_cells}
    scored = {name: score_split(c, dm, "test", threads, seed) for name, c in cells.items()}
    return {"mean": {name: s["mean"] for name, s in scored.items()},
            "per_condition": {name: s["per_condition"] for name, s in scored.items()},
            "seconds": time.perf_counter() - start,
            "note": "cell-eval full profile less clustering_agreement; predicted cells clipped at 0; the real control "
                    "cells in both files (at most 2,000, seeded); DE by cell-eval (pdex, Wilcoxon, FDR 0.05)"}


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


def train_flow(cfg: dict, run_dir: Path) -> tuple[PerturbationFlow, float, bool]:
    """Fit the flow model of ``cfg`` in ``run_dir``; return the best checkpoint's module, seconds and ``resumed``.

    ``resumed``: the folder already held a ``last.ckpt`` (``sciml fit`` resumes it; a finished run only reloads, so
    the seconds are not a training time).
    """
    cfg = copy.deepcopy(cfg) | {"run_dir": str(run_dir)}
    resumed = any(run_dir.glob("**/last.ckpt"))
    start = time.perf_counter()
    metrics = train(cfg, test=False)
    seconds = time.perf_counter() - start
    state = load_lightning_checkpoint(metrics["best_checkpoint"])
    module = PerturbationFlow(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    return module.eval(), seconds, resumed


def legacy_predictions(module: PerturbationFlow, dm, split: str, n_cells: int, seed: int) -> dict:
    """The reference sampler: nothing cached, one condition at a time.

    One condition per call, 10 RK4 steps, the whole network (control tokens, their keys and values, perturbation
    embedding) recomputed at every evaluation, no projection onto x ≥ 0.
    """
    out = {}
    for key in dm.conditions[split]:
        x_ctrl = torch.as_tensor(draw_controls(dm.control_matrix(key), n_cells, np.random.default_rng([seed, 0])),
                                 dtype=torch.float32)[None]
        pert = torch.as_tensor([dm.encode(key)], dtype=torch.long)
        x0 = module.path.initial(x_ctrl, torch.Generator().manual_seed(seed * 1_000_003))
        with torch.no_grad():
            def field(x, t, x_ctrl=x_ctrl, pert=pert):
                return module.velocity(x, t.expand(x.shape[:2]), x_ctrl, pert)

            cells = integrate(field, x0, 10, "rk4")
        out[key] = cells[0].numpy()
    return out


def _split_summary(cells: dict, dm, split: str, seed: int) -> dict:
    table = evaluate(cells, dm, split, seed)
    return {k: float(table[k].mean()) for k in ("mse", "pearson_delta", "energy", "mmd")} | {
        "negative_share": float(np.mean([np.mean(x < 0) for x in cells.values()]))}


def speed_table(module: PerturbationFlow, dm, n_cells: int, seed: int) -> dict:
    """Today's sampler beside the fast one (metrics vs steps, cells per second) on val and test, one run."""
    rows = []
    for split in ("val", "test"):
        n = len(dm.conditions[split]) * n_cells
        start = time.perf_counter()
        cells = legacy_predictions(module, dm, split, n_cells, seed)
        rows.append({"sampler": "today (rk4 10, per condition, no cache)", "method": "rk4", "steps": 10,
                     "evaluations": 40, "split": split, "cells_per_second": n / (time.perf_counter() - start)}
                    | _split_summary(cells, dm, split, seed))
        for method, steps in SPEED_STEPS:
            start = time.perf_counter()
            cells = split_predictions(module, dm, split, n_cells, seed, steps, method)
            rows.append({"sampler": "fast (batched, cached, x >= 0)", "method": method, "steps": steps,
                         "evaluations": steps * (4 if method == "rk4" else 1), "split": split,
                         "cells_per_second": n / (time.perf_counter() - start)}
                        | _split_summary(cells, dm, split, seed))
    return {"rows": rows, "n_cells": n_cells, "config_sampler": [module.flow["method"], module.flow["steps"]]}


def projected_additive(dm, n_cells: int, seed: int, truth: dict | None) -> pd.DataFrame:
    """The additive baseline's cells projected onto x ≥ 0 like the flow model's (model ``additive_projected``).

    Separates what the projection alone gains over the additive baseline from what the model adds.
    """
    from sciml.perturbation.baselines.simple import Additive
    from sciml.perturbation.metrics import baseline_predictions

    cells = baseline_predictions(Additive().fit(dm), dm, "test", n_cells, seed)
    cells = {k: np.maximum(v, 0.0) for k, v in cells.items()}
    return evaluate(cells, dm, "test", seed, truth=truth).assign(model="additive_projected", split="test")


def exact_additive(dm, seed: int, truth: dict | None) -> pd.DataFrame:
    """The additive baseline's exact mean on test (model ``additive_mean``), without a draw of control cells.

    The ``additive`` rows shift ``n_cells`` drawn control cells, so their mean carries the draw's sampling error, as
    the flow's does; a fallen-back flow model generates around the exact mean of the whole control population
    (clipped at 0), so this row is the bar it is held to. Mean metrics only (no cells: energy and MMD are NaN).
    """
    from sciml.perturbation.baselines.simple import Additive

    model = Additive().fit(dm)
    means = {k: model.predict_mean(k) for k in dm.conditions["test"]}
    return evaluate(means, dm, "test", seed, truth=truth).assign(model="additive_mean", split="test")


def fallback_gap(cells: dict, dm) -> float:
    """Largest |generated mean − max(additive baseline's mean, 0)| over the conditions of ``cells`` and genes.

    Float rounding (~1e-6) when the additive fallback is exact: on a one-cell-type screen and under cell-type
    transfer (a gene's effect is the mean over the cell types it was measured in, for both); for a cell type where
    the gene was measured the baseline uses that cell type's effect and the model the mean, so they can differ.
    """
    from sciml.perturbation.baselines.simple import Additive

    additive = Additive().fit(dm)
    return float(max(np.abs(x.mean(0) - np.maximum(additive.predict_mean(k), 0)).max() for k, x in cells.items()))


def per_double(table: pd.DataFrame) -> dict:
    """Flow / additive MSE of every held-out condition and the worst ratio."""
    flow = table[table["model"] == "flow"].set_index("condition")["mse"]
    add = table[table["model"] == "additive"].set_index("condition")["mse"]
    ratio = (flow / add).to_dict()
    worst = max(ratio, key=ratio.get) if ratio else None
    return {"mse_ratio_to_additive": ratio, "worst_condition": worst,
            "worst_ratio": ratio[worst] if worst else None}


def run_case(name: str, cfg: dict, run_dir: Path, n_cells: int, alpha: float, truth: dict | None,
             speed: bool = False, cell_eval: bool = True) -> dict:
    """Train, choose on val (prior at build, additive fallback after training), predict and evaluate one case.

    Baselines and the noise ceiling run on the same data module.
    """
    seed = int(cfg.get("seed", 0))
    module, train_s, resumed = train_flow(cfg, run_dir)
    dm = build_datamodule(cfg, None)
    check = versus_additive(module, dm, n_cells, seed)
    fallback = apply_fallback(module, check, dm)
    start = time.perf_counter()
    test_cells = split_predictions(module, dm, "test", n_cells, seed)
    gen_s = time.perf_counter() - start
    frames = [evaluate_baselines(dm, "test", n_cells=n_cells, seed=seed, truth=truth, names=BASELINE_NAMES),
              projected_additive(dm, n_cells, seed, truth), exact_additive(dm, seed, truth),
              evaluate(test_cells, dm, "test", seed, truth=truth).assign(model="flow")]
    table = pd.concat(frames, ignore_index=True)
    fit = effects(split_predictions(module, dm, "val", n_cells, seed), dm)
    cal = effects(split_predictions(module, dm, "calib", n_cells, seed), dm)
    test = effects(test_cells, dm)
    bands = EffectBands.fit(*fit, *cal, alpha=alpha)
    result = {"case": name, "seed": seed, "split": dm.split["kind"], "n_genes": len(dm.genes),
              "conditions": {k: len(v) for k, v in dm.conditions.items()}, "train_seconds": train_s,
              "cells_per_second": len(test_cells) * n_cells / gen_s, "n_cells": n_cells,
              "sampler": [module.flow["method"], module.flow["steps"]], "prior": module.prior_settings.prior,
              "shrink": module.prior_settings.shrink, "kappa": module.prior_settings.kappa,
              "denoise": module.prior_settings.denoise,
              "val_check": check, "additive_fallback": fallback, "resumed_checkpoint": resumed,
              "fallback_gap_to_additive": fallback_gap(test_cells, dm) if fallback else None,
              "negative_share": float(np.mean([np.mean(x < 0) for x in test_cells.values()])),
              "bands": band_metrics(bands, *test) | pooled_coverage(bands, cal, test, alpha) | {"alpha": alpha},
              "per_double": per_double(table),
              "per_condition": table.replace({np.nan: None}).to_dict("records"), "summary": {}}
    for model, rows in table.groupby("model"):
        result["summary"][model] = summarise(rows).reindex(columns=METRICS).replace({np.nan: None}).to_dict("index")
        if "interacting" in rows and rows["interacting"].fillna(False).astype(bool).any():
            inter = rows[rows["interacting"].fillna(False).astype(bool)][METRICS].mean()
            result["summary"][model]["interacting_doubles"] = inter.replace({np.nan: None}).to_dict()
    if cell_eval:
        result["cell_eval"] = cell_eval_case(test_cells, dm, n_cells, seed, max(1, torch.get_num_threads()))
    if speed:
        result["speed"] = speed_table(module, dm, n_cells, seed)
    return result


def seeded_case(base: dict, path: Path, seed: int) -> dict:
    """A copy of the recipe ``base`` on the screen at ``path``, with ``seed`` as model and split seed."""
    cfg = copy.deepcopy(base) | {"seed": seed}
    cfg["data"] |= {"path": str(path), "split": cfg["data"]["split"] | {"seed": seed}}
    return cfg


def grn_case(setting: str, seed: int, base: dict, work: Path, n_cells: int, alpha: float, speed: bool,
             cell_eval: bool = True) -> dict:
    """Simulate ``configs/data/grn_<setting>.yaml`` with ``seed`` and run the case on it."""
    data_cfg = load_config(ROOT / "configs" / "data" / f"grn_{setting}.yaml")["grn"]
    path = work / f"grn_{setting}_seed{seed}.h5ad"
    adata = simulate(data_cfg | {"seed": seed})
    write_h5ad(adata, path)
    truth = read_ground_truth(adata)
    cfg = seeded_case(base, path, seed)
    out = run_case(f"grn/{setting}", cfg, work / f"grn_{setting}_seed{seed}", n_cells, alpha, truth, speed,
                   cell_eval)
    return out | {"setting": setting, "fraction_interacting": truth["fraction_interacting"]}


def done_when(results: dict) -> dict:
    """Per simulator case: ≤ 0.75 × additive, no double over 2 ×, no negative value, band coverage; Norman and speed."""
    rows = []
    for r in results.get("grn", []):
        s = r["summary"]
        flow, add = s["flow"]["all"]["mse"], s["additive"]["all"]["mse"]
        rows.append({"setting": r["setting"], "seed": r["seed"], "flow_mse": flow, "additive_mse": add,
                     "ratio": flow / add, "mean_le_075_additive": flow <= 0.75 * add,
                     "worst_ratio": r["per_double"]["worst_ratio"],
                     "no_double_over_2x": r["per_double"]["worst_ratio"] <= 2.0,
                     "negative_share": r["negative_share"], "zero_negative": r["negative_share"] == 0.0,
                     "coverage_resplit": r["bands"]["coverage_simultaneous_resplit"],
                     "additive_fallback": r["additive_fallback"],
                     "kappa": r.get("kappa"), "denoise": r.get("denoise")})
    out = {"grn": rows}
    norman = [r for r in results.get("real", []) if r["case"].startswith("norman")]
    if norman:
        def mean(model: str) -> float | None:
            if not all(model in r["summary"] for r in norman):
                return None
            return float(np.mean([r["summary"][model]["all"]["mse"] for r in norman]))

        flow, add, exact = mean("flow"), mean("additive"), mean("additive_mean")
        out["norman"] = {"flow_mse_mean_over_splits": flow, "additive_mse_mean_over_splits": add,
                         "additive_exact_mean_mse_mean_over_splits": exact,
                         "not_worse_than_additive": flow <= add and (exact is None or flow <= exact),
                         "splits": [{"case": r["case"], "flow_mse": r["summary"]["flow"]["all"]["mse"],
                                     "additive_mse": r["summary"]["additive"]["all"]["mse"],
                                     "additive_exact_mean_mse": r["summary"].get("additive_mean", {}).get(
                                         "all", {}).get("mse"),
                                     "val_check": r["val_check"], "additive_fallback": r["additive_fallback"]}
                                    for r in norman]}
    return out


def print_case(r: dict) -> None:
    """Table of the headline metrics (all test conditions, and interaction-bearing doubles if any)."""
    print(f"\n== {r['case']} seed {r['seed']} ({r['split']}, {r['conditions']}) train {r['train_seconds']:.0f} s, "
          f"{r['cells_per_second']:.0f} cells/s; κ {r.get('kappa')} τ {r.get('denoise')}, val {r['val_check']}, "
          f"fallback {r['additive_fallback']}; worst double {r['per_double']['worst_ratio']}; bands: {r['bands']}")
    rows = {m: {k: v["all"][k] for k in METRICS} for m, v in r["summary"].items()}
    print(pd.DataFrame(rows).T.round(4).to_string())
    if "cell_eval" in r:
        print(f"cell-eval ({r['cell_eval']['seconds']:.0f} s):")
        print(pd.DataFrame(r["cell_eval"]["mean"]).T.reindex(columns=CELL_EVAL_HEADLINE).round(4).to_string())
    if "speed" in r:
        print(pd.DataFrame(r["speed"]["rows"]).round(4).to_string())


def case_key(result: dict) -> str:
    """The name of a case in a results file: ``grn/<setting>/seed<k>`` or the real case's name."""
    return f"{result['case']}/seed{result['seed']}" if result["case"].startswith("grn/") else result["case"]


def merge(parts: list[dict]) -> dict:
    """One results file from the results of complete runs, by case (a later part's case replaces an earlier one's).

    Run-level fields (threads, torch, alpha, epochs) are the last part's; notes are kept once each, in order.
    """
    out = {k: v for part in parts for k, v in part.items() if k not in ("grn", "real", "notes", "done_when")}
    for section in ("grn", "real"):
        cases = {case_key(r): r for part in parts for r in part.get(section, [])}
        out[section] = list(cases.values())
    out["notes"] = list(dict.fromkeys(n for part in parts for n in part.get("notes", [])))
    out["done_when"] = done_when(out)
    return out


def read_results(path: str | Path) -> dict:
    """A results file written by this script; ``SystemExit`` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"error: {path}: not a readable results file ({err.__class__.__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("grn", []), list):
        raise SystemExit(f"error: {path}: not a results file of benchmarks/perturbation.py")
    return data


def write_results(results: dict, output: str | Path, fresh: bool = False) -> dict:
    """Write a complete run's ``results`` to ``output``, merged by case into the file there unless ``fresh``."""
    output = Path(output)
    results = json.loads(json.dumps(results, default=float))  # numpy scalars as JSON numbers
    merged = merge([read_results(output), results]) if output.is_file() and not fresh else merge([results])
    write_json(output, merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    """Run the cases and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS + OTHER,
                   help=f"simulator settings (configs/data/grn_<name>.yaml); not tuned on: {', '.join(OTHER)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="override data.steps_per_epoch")
    p.add_argument("--n-cells", type=int, default=200, help="generated cells per test condition")
    p.add_argument("--no-real", action="store_true", help="skip Norman and McFaline")
    p.add_argument("--no-sim", action="store_true", help="skip the simulator settings")
    p.add_argument("--real", nargs="+", default=list(REAL), choices=list(REAL), help="real-data cases to run")
    p.add_argument("--speed", action="store_true", help="today's vs the fast sampler on the first simulator case")
    p.add_argument("--merge", nargs="+", default=None, help="merge the results files of complete runs into "
                   "--output (by case, later files winning)")
    p.add_argument("--fresh", action="store_true", help="write this run's cases alone, not merged into --output")
    p.add_argument("--set", nargs="*", default=[], help="config overrides for every case, e.g. --set "
                   "--model.flow.prior_dropout 0 (after --set, as in `sciml fit`)")
    p.add_argument("--no-cell-eval", action="store_true", help="leave out cell-eval's metrics")
    p.add_argument("--work", default="benchmarks/runs/perturbation")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "perturbation.json"))
    args, extra = p.parse_known_args(argv)
    if args.merge:
        write_json(args.output, merge([read_results(path) for path in args.merge]))
        print(f"wrote {args.output}")
        return 0
    args.set = args.set + extra
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    names = {"grn": "grn_default", "norman": "norman_devel", "mcfaline": "mcfaline_devel"}
    cfgs = {k: load_config(ROOT / "configs" / "perturbation" / f"{v}.yaml") for k, v in names.items()}
    for cfg in cfgs.values():
        apply_overrides(cfg, args.set)
        cfg["threads"] = args.threads
        if args.epochs:
            cfg["trainer"]["max_epochs"] = args.epochs
        if args.steps_per_epoch:
            cfg["data"]["steps_per_epoch"] = args.steps_per_epoch
    alpha = float(cfgs["grn"]["calibration"]["alpha"])
    results = {"threads": args.threads, "torch": torch.__version__, "alpha": alpha,
               "epochs": {k: c["trainer"]["max_epochs"] for k, c in cfgs.items()}, "grn": [], "real": [], "notes": []}
    cell_eval = not args.no_cell_eval and cell_eval_available()
    if not cell_eval:
        results["notes"].append("cell-eval metrics left out: " + ("--no-cell-eval" if args.no_cell_eval else
                                "cell-eval not installed (pip install 'sciml[eval]')"))
    if not args.no_sim:
        for setting in args.settings:
            for seed in args.seeds:
                speed = args.speed and not results["grn"]
                results["grn"].append(grn_case(setting, seed, cfgs["grn"], work, args.n_cells, alpha, speed,
                                               cell_eval))
                print_case(results["grn"][-1])
    if not args.no_real:
        for case in args.real:
            key, split = REAL[case]
            cfg = copy.deepcopy(cfgs[key])
            if not (ROOT / cfg["data"]["path"]).exists() and not Path(cfg["data"]["path"]).exists():
                results["notes"].append(f"{case}: skipped, {cfg['data']['path']} not present")
                continue
            cfg["data"]["split"] |= split
            results["real"].append(run_case(case, cfg, work / case, args.n_cells, float(cfg["calibration"]["alpha"]),
                                            None, cell_eval=cell_eval))
            print_case(results["real"][-1])
    results["done_when"] = done_when(results)  # this run's cases; the file's is recomputed over all of its cases
    print(f"\ndone when: {json.dumps(results['done_when'], indent=1, default=float)}")
    write_results(results, args.output, args.fresh)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
