"""What the perturbation recipe costs at the width of real screens: set-up, training, prediction and peak memory.

Grid: genes {500, 1,000, 2,000, 5,000} × cells {10,000, 50,000, 100,000} (``--genes``, ``--cells`` for a subset).
Per grid cell, a seeded simulated screen (``sciml.perturbation.sim.simulate``: 100 singles and 200 doubles, so 300
conditions, 10% of the cells controls and the rest split evenly over the conditions; knockdown; the wide configs'
network sizes), then three child processes, each with ``OMP_NUM_THREADS`` and torch threads set to ``--threads``:

1. ``simulate``: the screen written to ``--work`` (reused when already there);
2. ``fit``: the shipped recipe (``configs/perturbation/grn_default.yaml``, unchanged but for ``data.path``) built
   as ``sciml fit`` builds it (``sciml.perturbation.task.build``: read the file, split, select genes, gene graph,
   singles and doubles, combination rule, every ``auto`` of the prior chosen) — the **set-up time**; then
   ``--train-steps`` optimiser steps of the training loss (AdamW, gradient clip 1) on the recipe's batches, the
   first one reported apart (warm-up), and one validation pass as Lightning runs it (loss + 4-step sampling of the
   val conditions). **Per epoch** = ``data.steps_per_epoch`` × median step + the validation pass: *extrapolated from
   the timed steps*, not a timed epoch;
3. ``predict``: the fitted model reloaded from its state dict in a fresh process, the control cells read from the
   file (:func:`sciml.perturbation.data.table.read_control_cells`, as ``sciml perturbation predict`` does), then
   ``--predict-conditions`` conditions × ``--predict-cells`` cells generated (:func:`sciml.perturbation.predict.
   generate`, the recipe's 4 Euler steps, the network on each condition's ``flow.predict_genes`` most affected
   genes: 256 on wider panels). The model has only the timed steps of training: the sampling cost does not depend on
   the weights.

Peak memory is ``ru_maxrss`` of each child (``os.wait4``), in GiB; wall and CPU seconds (user + system) are both
reported, since wall time on a shared machine is an upper bound. The load average before and after each child is
recorded beside it.

Results go to ``--output`` after every child, atomically (``benchmarks/_results.py``), so a killed run keeps what it
measured; a rerun skips grid cells already measured (``--rerun`` measures them again). Every grid cell of
``--genes`` × ``--cells`` not measured is written as ``{"status": "not run"}``: no number is ever filled in. A child
that exceeds ``--max-seconds`` is stopped (its own PID only) and its grid cell is recorded as ``timed out`` with the
phases it finished; grid cells at least as large in both genes and cells are then not started.

With ``--accuracy 1000``, instead of the grid: the recipe's held-out doubles against the additive baseline on the
seeded screen of ``configs/perturbation/grn_1000.yaml`` (:func:`accuracy`: the prior mean, which the recipe's
generated mean equals) → ``benchmarks/results/perturbation_scale_accuracy.json``.

Usage::

    nice -n 10 python benchmarks/perturbation_scale.py [--genes 500 1000] [--cells 10000] [--threads 1]
        [--train-steps 5] [--max-seconds 900] [--work benchmarks/runs/perturbation_scale]
        [--output benchmarks/results/perturbation_scale.json] [--rerun]
    nice -n 10 python benchmarks/perturbation_scale.py --accuracy 1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import merge_results, write_json  # noqa: E402  (benchmarks/_results.py: atomic writes)

RECIPE = ROOT / "configs/perturbation/grn_default.yaml"
GENES = (500, 1000, 2000, 5000)
CELLS = (10_000, 50_000, 100_000)
NETWORK = {500: (10, 100), 1000: (20, 150), 2000: (40, 250), 5000: (100, 500)}  # genes: (masters, regulators)
CONTROL_SHARE = 0.1
PROGRAM_SIZES = ("seed", "n_genes", "n_singles", "n_doubles", "cells_per_condition", "control_cells")
GIB = 1024**2  # ru_maxrss is in KiB on Linux


# ---------------------------------------------------------------------------------------------------- the screen
def screen_config(genes: int, cells: int, singles: int, doubles: int, seed: int = 0) -> dict:
    """Simulator settings of a grid cell: ``singles + doubles`` conditions, 10% controls, ``cells`` cells in all."""
    masters, regulators = NETWORK.get(genes, (max(5, genes // 50), max(singles, genes // 10)))
    controls = max(int(round(CONTROL_SHARE * cells)), 1)
    per_condition = max((cells - controls) // (singles + doubles), 2)
    return {"seed": seed, "n_genes": genes, "n_masters": masters, "n_regulators": max(regulators, singles),
            "and_share": 0.5, "n_singles": singles, "n_doubles": doubles, "and_pair_share": 0.7,
            "cells_per_condition": per_condition, "control_cells": controls, "perturbation": "knockdown",
            "efficiency": 0.9, "dispersion": 10.0}


def key(genes: int, cells: int) -> str:
    """Name of a grid cell in the results file."""
    return f"{genes}x{cells}"


# ---------------------------------------------------------------------------------------------------- children
def _rss_gib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / GIB, 3)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _report(path: Path, payload: dict) -> None:
    write_json(path, payload)


def child_simulate(args) -> None:
    """Simulate the screen of one grid cell and write it to ``args.data``."""
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.sim.simulate import simulate

    start = time.perf_counter()
    adata = simulate(json.loads(args.sim))
    write_h5ad(adata, args.data)
    _report(Path(args.report), {"wall_s": round(time.perf_counter() - start, 2), "cpu_s": round(_cpu_s(), 2),
                                "n_cells": int(adata.n_obs), "n_genes": int(adata.n_vars),
                                "rss_gib": _rss_gib()})


def _timed(module, name: str, phases: dict) -> None:
    """Wrap ``module.name`` so that its wall seconds add up in ``phases[name]`` (a benchmark-only probe)."""
    inner = getattr(module, name)

    def wrapper(*a, **k):
        start = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - start, 2)

    setattr(module, name, wrapper)


def child_fit(args) -> None:
    """Set up the recipe on ``args.data`` (timed), time ``args.train_steps`` steps and a val pass, save the model."""
    import numpy as np
    import torch

    from sciml.cli.config import load_config
    from sciml.perturbation import task

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    report = Path(args.report)
    cfg = load_config(RECIPE)
    cfg["data"]["path"] = args.data
    out: dict = {"recipe": str(RECIPE.relative_to(ROOT)), "phases": {}}
    for name in ("datamodule", "read_screen", "resolve"):
        _timed(task, name, out["phases"])
    start, cpu = time.perf_counter(), _cpu_s()
    dm, model = task.build(cfg)
    out["setup"] = {"wall_s": round(time.perf_counter() - start, 2), "cpu_s": round(_cpu_s() - cpu, 2),
                    "rss_gib": _rss_gib(), "genes": len(dm.genes), "cells": int(dm.table.n_cells),
                    "max_genes": model.flow["max_genes"], "kappa": model.prior_settings.kappa,
                    "shrink": model.prior_settings.shrink}
    out["phases"] = {"read_and_graph": out["phases"].pop("datamodule"), "singles_and_doubles":
                     out["phases"].pop("read_screen"), "prior_choice": out["phases"].pop("resolve"), **out["phases"]}
    _report(report, out)

    start = time.perf_counter()
    with torch.no_grad():
        model.prior_tables()  # computed on first use: the singles' empirical-Bayes posterior means (ash_by_row)
    out["setup"]["prior_tables_s"] = round(time.perf_counter() - start, 2)
    _report(report, out)

    optim = cfg["model"].get("optim", {})
    opt = torch.optim.AdamW(model.parameters(), lr=optim.get("lr", 2e-3), weight_decay=optim.get("weight_decay", 0))
    clip = float(cfg.get("trainer", {}).get("gradient_clip_val") or 0)
    model.train()
    steps, loader = [], iter(dm.loader("train", shuffle=True))
    start_all, cpu = time.perf_counter(), _cpu_s()
    for _ in range(args.train_steps):
        start = time.perf_counter()
        batch = next(loader)
        loss = model.losses(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        steps.append(time.perf_counter() - start)
    train_cpu, train_wall = _cpu_s() - cpu, time.perf_counter() - start_all
    model.eval()
    batches = dm.loader("val")
    timed = min(args.val_batches, len(batches))
    start = time.perf_counter()
    with torch.no_grad():
        for i, batch in enumerate(batches):
            if i == timed:
                break
            model.losses(batch)
            model.sample(batch["x_ctrl"], batch["pert_genes"], model.flow["val_steps"], "euler")
    val_timed_s = time.perf_counter() - start
    val_s = val_timed_s * len(batches) / max(timed, 1)
    per_epoch = int(cfg["data"].get("steps_per_epoch", 100))
    later = steps[1:] or steps
    step_s = float(np.median(later))
    out["train"] = {"steps_timed": len(steps), "first_step_s": round(steps[0], 3), "step_s_median": round(step_s, 3),
                    "steps_wall_s": round(train_wall, 2),
                    "steps_cpu_s": round(train_cpu, 2),
                    "val_conditions": len(dm.conditions["val"]), "val_batches": len(batches),
                    "val_batches_timed": timed, "val_timed_s": round(val_timed_s, 2), "val_pass_s": round(val_s, 2),
                    "steps_per_epoch": per_epoch, "epoch_s_extrapolated": round(per_epoch * step_s + val_s, 1),
                    "epochs_of_recipe": int(cfg["trainer"]["max_epochs"]),
                    "fit_s_extrapolated": round(int(cfg["trainer"]["max_epochs"]) * (per_epoch * step_s + val_s), 1),
                    "how": "epoch = steps_per_epoch x median timed step (first step excluded) + one val pass "
                           "(val_timed_s x val_batches / val_batches_timed); extrapolated, not a timed epoch",
                    "rss_gib": _rss_gib()}
    torch.save({"hparams": dict(model.hparams), "state_dict": model.state_dict()}, args.model)
    _report(report, out)


def child_predict(args) -> None:
    """Reload the fitted model, read the control cells, generate conditions × cells (each timed)."""
    import torch

    from sciml.perturbation.data.conditions import gene_indices, parse_condition
    from sciml.perturbation.data.table import read_control_cells
    from sciml.perturbation.module import PerturbationFlow
    from sciml.perturbation.predict import generate

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    state = torch.load(args.model, weights_only=False)
    model = PerturbationFlow(**state["hparams"])
    model.load_state_dict(state["state_dict"], strict=True)
    model.eval()
    ctrl = read_control_cells(args.data, model.measured_genes)
    labels = screen_labels(args.data)[-args.predict_conditions:]
    index = {g: i for i, g in enumerate(model.config["genes"])}
    rows = [gene_indices(parse_condition(label), index) for label in labels]
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    with torch.no_grad():
        model.prior_tables()  # the singles' empirical-Bayes posterior means, computed on first use
    prior_s = time.perf_counter() - start
    timed = min(args.predict_timed or len(rows), len(rows))
    start, cpu = time.perf_counter(), _cpu_s()
    cells = generate(model, ctrl, rows[:timed], args.predict_cells, seed=0)
    gen_s = time.perf_counter() - start
    scale = len(rows) / timed
    _report(Path(args.report), {
        "conditions": len(rows), "cells_per_condition": args.predict_cells, "conditions_timed": timed,
        "control_cells": int(len(ctrl)), "load_s": round(load_s, 2), "prior_tables_s": round(prior_s, 2),
        "generate_timed_s": round(gen_s, 2), "generate_timed_cpu_s": round(_cpu_s() - cpu, 2),
        "generate_s": round(gen_s * scale, 2), "total_s": round(load_s + prior_s + gen_s * scale, 2),
        "how": "exact" if timed == len(rows) else
               f"generate_s = generate_timed_s x {len(rows)}/{timed} (extrapolated: conditions are generated one "
               "call per condition of 300 cells, independently)",
        "steps": model.flow["steps"], "method": model.flow["method"],
        "predict_genes": model.flow["predict_genes"] or "all",
        "negative_values": int((cells < 0).sum()), "rss_gib": _rss_gib()})


def screen_labels(path: str) -> list[str]:
    """Perturbation labels of a simulated screen, singles then doubles (``uns['grn']['conditions']`` less ``ctrl``)."""
    import h5py

    with h5py.File(path, "r") as f:
        labels = [x.decode() if isinstance(x, bytes) else str(x) for x in f["uns/grn/conditions"][()]]
    return [label for label in labels if label != "ctrl"]


CHILDREN = {"simulate": child_simulate, "fit": child_fit, "predict": child_predict}


# ---------------------------------------------------------------------------------------------------- parent
def load_average() -> list[float]:
    """1, 5 and 15 minute load averages of the machine."""
    return [round(x, 2) for x in os.getloadavg()]


def run_child(kind: str, args, extra: list[str], report: Path, log: Path, max_seconds: float) -> dict:
    """Run one child; return its report with ``wall_s`` (parent-side), ``peak_rss_gib`` and ``cpu_s`` from wait4."""
    report.unlink(missing_ok=True)
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
                        "OPENBLAS_NUM_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--report", str(report),
           "--threads", str(args.threads), *extra]
    before = load_average()
    start = time.perf_counter()
    with open(log, "w") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        status, usage, timed_out = None, None, False
        while status is None:
            pid, code, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, usage = code, ru
                break
            if time.perf_counter() - start > max_seconds:
                timed_out = True
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    _, status, usage = os.wait4(proc.pid, 0)
                except ChildProcessError:
                    status = -1
                break
            time.sleep(0.5)
        proc.returncode = os.waitstatus_to_exitcode(status) if status is not None and status >= 0 else -1
    wall = time.perf_counter() - start
    result = json.loads(report.read_text()) if report.is_file() else {}
    result |= {"process_wall_s": round(wall, 2), "load_average_before": before, "load_average_after": load_average()}
    if usage is not None:
        result |= {"peak_rss_gib": round(usage.ru_maxrss / GIB, 3),
                   "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}
    if timed_out:
        result["status"] = f"timed out after {max_seconds:.0f} s"
    elif proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:] if log.is_file() else []
        result["status"] = f"failed (exit {proc.returncode}): {' | '.join(tail)}"
    else:
        result["status"] = "done"
    return result


def header(args) -> dict:
    """Run-level fields: the machine, threads, niceness, its load, what each number means."""
    import torch

    return {"benchmark": "perturbation_scale", "recipe": str(RECIPE.relative_to(ROOT)),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                        "torch": torch.__version__, "threads": args.threads, "niceness": os.nice(0)},
            "screen": {"singles": args.singles, "doubles": args.doubles, "control_share": CONTROL_SHARE,
                       "seed": args.seed},
            "predict": {"conditions": args.predict_conditions, "cells": args.predict_cells},
            "caveat": args.caveat,
            "units": "seconds (wall unless *_cpu_s), GiB (peak_rss_gib = ru_maxrss of the child process)"}


def measure_cell(genes: int, cells: int, args, results: dict, output: Path, work: Path,
                 skip: frozenset = frozenset()) -> dict:
    """Simulate (or reuse) the screen of one grid cell, then fit and predict in children; save after each."""
    name = key(genes, cells)
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    data, model = folder / "screen.h5ad", folder / "model.pt"
    entry = {"genes": genes, "cells": cells, "status": "running",
             "screen": screen_config(genes, cells, args.singles, args.doubles, args.seed)}
    old = results["grid"].get(name, {})
    if data.is_file() and old.get("simulate", {}).get("status") == "done":
        entry["simulate"] = old["simulate"] | {"reused": True}
    else:
        data.unlink(missing_ok=True)
        print(f"{name}: simulating", flush=True)
        entry["simulate"] = run_child("simulate", args, ["--sim", json.dumps(entry["screen"]), "--data", str(data)],
                                      folder / "simulate.json", folder / "simulate.log", args.max_seconds)
    steps = [("fit", ["--data", str(data), "--model", str(model), "--train-steps", str(args.train_steps),
                    "--val-batches", str(args.val_batches)]),
             ("predict", ["--data", str(data), "--model", str(model), "--predict-conditions",
                          str(args.predict_conditions), "--predict-cells", str(args.predict_cells),
                          "--predict-timed", str(args.predict_timed)])]
    previous = "simulate"
    for kind, extra in steps:
        if entry[previous].get("status") != "done":
            break
        previous = kind
        if kind in skip:
            entry[kind] = {"status": "not run (timed out on a smaller grid cell)"}
            break
        results["grid"][name] = entry
        write_json(output, results)
        if kind == "fit" and model.is_file() and old.get("fit", {}).get("status") == "done" \
                and entry["simulate"].get("reused"):
            entry["fit"] = old["fit"] | {"reused": True}  # a run killed during predict: its fit is kept
            continue
        print(f"{name}: {kind}", flush=True)
        entry[kind] = run_child(kind, args, extra, folder / f"{kind}.json", folder / f"{kind}.log", args.max_seconds)
    failed = [f"{k}: {entry[k]['status']}" for k in ("simulate", "fit", "predict")
              if k in entry and entry[k].get("status") != "done"]
    entry["status"] = "measured" if not failed and "predict" in entry else (failed[0] if failed else "incomplete")
    if entry["status"] == "measured":
        model.unlink(missing_ok=True)
    return entry


def summary_row(entry: dict) -> dict:
    """The docs table's fields of a measured grid cell."""
    fit, pred = entry.get("fit", {}), entry.get("predict", {})
    return {"setup_s": fit.get("setup", {}).get("wall_s"), "setup_cpu_s": fit.get("setup", {}).get("cpu_s"),
            "prior_tables_s": fit.get("setup", {}).get("prior_tables_s"),
            "epoch_s_extrapolated": fit.get("train", {}).get("epoch_s_extrapolated"),
            "predict_s": pred.get("total_s"), "generate_s": pred.get("generate_s"),
            "fit_peak_rss_gib": fit.get("peak_rss_gib"),
            "predict_peak_rss_gib": pred.get("peak_rss_gib"), "simulate_s": entry.get("simulate", {}).get("wall_s")}


def accuracy(genes: int, args) -> dict:
    """The recipe's held-out doubles on the seeded screen of ``configs/perturbation/grn_<genes>.yaml`` (``--accuracy``).

    No network is needed for the mean: with ``remainder_mean: 0``, ``exact_mean`` and ``nonnegative`` the recipe's
    generated mean of a double whose singles were measured *is* its prior mean clipped at 0, so the MSE of the
    recipe is that of the prior mean (as in ``benchmarks/perturbation_prior.py``, whose ``sq_error`` scores it
    against the mean of the double's real cells, beside the additive baseline's unclipped mean). The prior is the
    one ``sciml fit`` chose on the screen: read from ``run/checkpoints/last.ckpt`` under the case folder when a fit
    left one there, else built here (:func:`sciml.perturbation.task.build`, choices on training + val). The export
    check is applied: when the prior is not better than additive on the val doubles the recipe falls back to
    additive (ratio 1). Targets: MSE ≤ 0.75 × additive, no double over 2 × additive, no negative value: the test
    doubles' cells are generated (``--accuracy-cells`` each, from the recipe's network as the checkpoint holds it),
    their negative values counted and their mean compared with the prior mean.
    """
    import torch
    from perturbation import seeded_case
    from perturbation_prior import sq_error

    from sciml.cli.config import load_config
    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.perturbation import task
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.module import PerturbationFlow
    from sciml.perturbation.predict import generate
    from sciml.perturbation.screen import double_keys, read_doubles
    from sciml.perturbation.sim.programs import simulate_programs
    from sciml.perturbation.sim.simulate import simulate

    torch.set_num_threads(args.threads)
    programs = args.simulator == "programs"
    folder = Path(args.work) / (f"programs_{genes}" if programs else f"accuracy_{genes}")
    folder.mkdir(parents=True, exist_ok=True)
    sim_cfg = load_config(ROOT / "configs" / "perturbation" / f"grn_{genes}.yaml")["grn"] | {"seed": args.seed}
    if programs:  # the same sizes, drawn by the program law
        sim_cfg = {k: sim_cfg[k] for k in PROGRAM_SIZES}
    path = folder / "screen.h5ad"
    out: dict = {"config": f"configs/perturbation/grn_{genes}.yaml", "seed": args.seed, "simulator": args.simulator}
    if not path.is_file():
        start = time.perf_counter()
        write_h5ad(simulate_programs(sim_cfg) if programs else simulate(sim_cfg), path)
        out["simulate_s"] = round(time.perf_counter() - start, 1)
    cfg = seeded_case(load_config(RECIPE), path, args.seed)
    ckpt = folder / "run" / "checkpoints" / "last.ckpt"
    start = time.perf_counter()
    if ckpt.is_file():
        state = load_lightning_checkpoint(ckpt)
        model = PerturbationFlow(**state["hyper_parameters"])
        model.load_state_dict(state["state_dict"], strict=True)
        dm = task.datamodule(cfg)
        out["prior_from"] = f"{ckpt.relative_to(ROOT)} (sciml fit on this screen, epoch {state.get('epoch')})"
    else:
        dm, model = task.build(cfg)
        out["prior_from"] = "sciml.perturbation.task.build on this screen"
    out["setup_s"] = round(time.perf_counter() - start, 1)
    flow = model.prior_settings.to_flow()
    out["chosen"] = {k: flow[k] for k in ("kappa", "denoise", "closure", "shrink", "blend")}
    model.eval()
    for split in ("val", "test"):
        keys = double_keys(dm, model.has_effect, split)
        ours, add = sq_error(model, dm, keys), sq_error(model, dm, keys, additive=True)
        ratio = (ours / add).tolist()
        out[split] = {"doubles": len(keys), "recipe_mse": float(ours.mean()), "additive_mse": float(add.mean()),
                      "ratio": float(ours.mean() / add.mean()), "worst_double_ratio": max(ratio),
                      "worst_double": keys[ratio.index(max(ratio))],
                      "per_double_ratio": dict(zip(keys, ratio, strict=True))}
    fallback = out["val"]["ratio"] >= 1.0 or out["val"]["doubles"] < 3
    keys = double_keys(dm, model.has_effect, "test")
    obs = read_doubles(dm, keys)
    start = time.perf_counter()
    cells = generate(model, dm.control_matrix(), [dm.encode(k) for k in keys], args.accuracy_cells, seed=args.seed)
    with torch.no_grad():
        mean = (obs.mu0 + model.prior_mean(obs.pert)).clamp_min(0.0).numpy()
    out["generated"] = {"doubles": len(keys), "cells_per_double": args.accuracy_cells,
                        "seconds": round(time.perf_counter() - start, 1), "negative_values": int((cells < 0).sum()),
                        "max_gap_mean_to_prior_mean": float(abs(cells.mean(1) - mean).max())}
    test = out["test"]
    out["additive_fallback"] = fallback
    out["done_when"] = {"ratio": 1.0 if fallback else test["ratio"],
                        "mean_le_075_additive": (1.0 if fallback else test["ratio"]) <= 0.75,
                        "worst_double_ratio": 1.0 if fallback else test["worst_double_ratio"],
                        "no_double_over_2x": fallback or test["worst_double_ratio"] <= 2.0,
                        "zero_negative": out["generated"]["negative_values"] == 0}
    out["how"] = ("no training needed for the mean: generated mean = prior mean clipped at 0 (exact_mean, "
                  "remainder_mean 0); MSE of the mean profile against the mean of the double's real cells, additive "
                  "= control mean + sum of the measured singles (unclipped)")
    return out


def _fmt(value, unit: str = "s") -> str:
    if value is None:
        return "–"
    if unit == "s":
        return f"{value / 60:.1f} min" if value >= 600 else f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"
    return f"{value:.2f} GiB"


def markdown_table(results: dict) -> str:
    """The docs table of a results file: one row per grid cell, ``not run`` where nothing was measured."""
    lines = ["| genes | cells | simulate | set-up (wall / CPU) | singles' shrinkage | per epoch (extrapolated) | "
             "12 epochs (extrapolated) | predict 100 × 300 | peak RSS fit / predict | load during fit |",
             "|" + "---|" * 10]
    for e in sorted(results["grid"].values(), key=lambda v: (v["genes"], v["cells"])):
        head = f"| {e['genes']:,} | {e['cells']:,} |"
        fit, pred, sim = e.get("fit", {}), e.get("predict", {}), e.get("simulate", {})
        if sim.get("status") != "done":
            lines.append(head + f" {sim.get('status', e['status'])} |" + " |" * 8)
            continue
        setup, train = fit.get("setup", {}), fit.get("train", {})
        cells = [_fmt(sim.get("wall_s"))]
        if fit.get("status") == "done":
            cells += [f"{_fmt(setup.get('wall_s'))} / {_fmt(setup.get('cpu_s'))}", _fmt(setup.get("prior_tables_s")),
                      _fmt(train.get("epoch_s_extrapolated")), _fmt(train.get("fit_s_extrapolated"))]
        else:
            cells += [fit.get("status", "not run")] + ["–"] * 3
        cells.append(_fmt(pred.get("total_s")) if pred.get("status") == "done" else pred.get("status", "not run"))
        cells.append(f"{_fmt(fit.get('peak_rss_gib'), 'GiB')} / {_fmt(pred.get('peak_rss_gib'), 'GiB')}")
        load = [fit.get("load_average_before", [None])[0], fit.get("load_average_after", [None])[0]]
        cells.append("–" if None in load else f"{load[0]:.1f}–{load[1]:.1f}")
        lines.append(head + " " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure the grid cells of ``--genes`` × ``--cells`` not measured yet (or run one child with ``--child``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--genes", type=int, nargs="+", default=list(GENES))
    p.add_argument("--cells", type=int, nargs="+", default=list(CELLS))
    p.add_argument("--singles", type=int, default=100)
    p.add_argument("--doubles", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--predict-conditions", type=int, default=100)
    p.add_argument("--predict-cells", type=int, default=300)
    p.add_argument("--predict-timed", type=int, default=5, help="conditions timed; the rest extrapolated (0: all)")
    p.add_argument("--val-batches", type=int, default=1, help="val batches timed; the pass extrapolated")
    p.add_argument("--max-seconds", type=float, default=900.0, help="per child process")
    p.add_argument("--work", default=str(ROOT / "benchmarks/runs/perturbation_scale"))
    p.add_argument("--output", default=str(ROOT / "benchmarks/results/perturbation_scale.json"))
    p.add_argument("--rerun", action="store_true", help="measure grid cells already measured again")
    p.add_argument("--caveat", default="", help="a note on the machine's load, kept in the JSON")
    p.add_argument("--accuracy", type=int, nargs="+", default=None, metavar="GENES",
                   help="instead of the grid: the recipe's accuracy on configs/perturbation/grn_<GENES>.yaml")
    p.add_argument("--accuracy-cells", type=int, default=50, help="cells generated per test double (--accuracy)")
    p.add_argument("--simulator", choices=("grn", "programs"), default="grn", help="--accuracy screens drawn by the "
                   "GRN simulator (the recipe's development screens) or by the program law it was not tuned on "
                   "(sciml.perturbation.sim.programs), at the sizes of configs/perturbation/grn_<GENES>.yaml")
    p.add_argument("--table", action="store_true", help="print the docs table of --output and exit")
    # children
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--report", help=argparse.SUPPRESS)
    p.add_argument("--sim", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        CHILDREN[args.child](args)
        return 0
    if args.table:
        print(markdown_table(json.loads(Path(args.output).read_text())))
        return 0
    if args.accuracy:
        output = Path(args.output.replace(".json", "_accuracy.json") if args.output.endswith("scale.json")
                      else args.output)
        for genes in args.accuracy:
            result = accuracy(genes, args) | {"caveat": args.caveat, "threads": args.threads,
                                               "command": "python benchmarks/perturbation_scale.py "
                                                          + " ".join(sys.argv[1:])}
            merge_results(output, {f"{args.simulator}_{genes}": result})
            print(f"{args.simulator}_{genes}: {json.dumps(result['done_when'], default=float)}", flush=True)
        print(f"wrote {output}", flush=True)
        return 0

    output, work = Path(args.output), Path(args.work)
    try:
        results = json.loads(output.read_text()) if output.is_file() else {}
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: {output} is not JSON ({err}); move it away first") from None
    grid = results.get("grid", {})
    caveat = args.caveat or results.get("caveat", "")
    args.caveat = caveat
    command = "python benchmarks/perturbation_scale.py " + " ".join(sys.argv[1:] if argv is None else argv)
    commands = [c for c in results.get("commands", []) if c != command] + [command]  # every run that wrote here
    results.pop("command", None)
    results = results | header(args) | {"commands": commands, "grid": grid}
    cells = [(g, n) for g in args.genes for n in args.cells]
    for g, n in cells:
        grid.setdefault(key(g, n), {"genes": g, "cells": n, "status": "not run"})
    write_json(output, results)
    stopped: list[tuple[int, int, str]] = []  # (genes, cells, phase) that timed out
    for g, n in sorted(cells, key=lambda c: (c[0] * c[1], c[0])):
        name = key(g, n)
        if grid[name].get("status") == "measured" and not args.rerun:
            print(f"{name}: measured already (--rerun to measure again)", flush=True)
            continue
        skip = frozenset(k for g0, n0, k in stopped if g >= g0 and n >= n0)
        if "simulate" in skip:
            print(f"{name}: not run (a smaller grid cell timed out)", flush=True)
            continue
        entry = measure_cell(g, n, args, results, output, work, skip)
        grid[name] = entry
        write_json(output, results)
        if entry["status"] == "measured":
            print(f"{name}: {json.dumps(summary_row(entry))}", flush=True)
        else:
            print(f"{name}: {entry['status']}", flush=True)
            stopped += [(g, n, k) for k in ("simulate", "fit", "predict")
                        if "timed out after" in entry.get(k, {}).get("status", "")]
    results["table"] = {k: summary_row(v) for k, v in grid.items() if v.get("fit", {}).get("status") == "done"}
    write_json(output, results)
    print(f"wrote {output}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
