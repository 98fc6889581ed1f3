"""Train the Materials Project crystal models and their CGCNN baselines side by side on one GPU, in a time budget.

Four ``sciml fit`` runs share the GPU at once: PRDNet and CGCNN on formation energy (``configs/crystal/
mp-formation-energy.yaml``) and on band gap (``configs/crystal/mp-band-gap.yaml``), same data, split and graphs.
The graphs are built once (``data.workers`` processes, cached). A short probe times optimiser steps of all four
runs together; each run then gets the number of epochs that fits what is left of ``--wall`` seconds (the cosine
schedule needs the epoch count up front). The epochs chosen are written to ``plan.json`` and to each run's
``config.yaml``, so a run is reproduced by its ``sciml fit`` command with ``--trainer.max_epochs``.

Usage::

    python benchmarks/crystal_mp_gpu.py --wall 540 --out results/   # on a GPU machine

Outputs in ``--out``: ``<run>.tar.gz`` per run (weights without optimiser state as ``model.pt``, ``config.yaml``,
``split.json``, ``metrics.json``, the CSV log) and ``plan.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

RUNS = {  # name: (config, overrides)
    "mp-formation-energy": ("configs/crystal/mp-formation-energy.yaml", []),
    "mp-band-gap": ("configs/crystal/mp-band-gap.yaml", []),
    "cgcnn-formation-energy": ("configs/crystal/mp-formation-energy.yaml",
                               ["--model.network", "{name: cgcnn, dim: 128, n_layers: 4, n_rbf: 40}"]),
    "cgcnn-band-gap": ("configs/crystal/mp-band-gap.yaml",
                       ["--model.network", "{name: cgcnn, dim: 128, n_layers: 4, n_rbf: 40}"]),
}
PROBE_STEPS, WARMUP_STEPS = 40, 8
RESERVE, SAFETY = 70.0, 0.85  # seconds kept for start-up, test and packing; share of the rest planned for epochs


def probe(config: str, overrides: list[str], out: Path) -> None:
    """Time ``PROBE_STEPS`` optimiser steps of one run (after a warm-up) and write seconds per step to ``out``."""
    import torch

    from sciml.cli.config import load_run_config
    from sciml.crystal.task import build

    cfg = load_run_config(config, overrides)
    dm, model = build(cfg)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = dm.train_dataloader()
    steps = len(loader)
    it = iter(())
    for k in range(WARMUP_STEPS + PROBE_STEPS):
        if k == WARMUP_STEPS:
            sync()
            start = time.perf_counter()
        batch = next(it, None)
        if batch is None:  # a small set: start the loader again
            it = iter(loader)
            batch = next(it)
        batch = batch.to(device)
        loss, _ = model._standardised_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sync()
    per_step = (time.perf_counter() - start) / PROBE_STEPS
    out.write_text(json.dumps({"s_per_step": per_step, "steps_per_epoch": steps,
                               "val_steps": len(dm.val_dataloader())}))


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _pack(name: str, run_dir: Path, out: Path) -> None:
    """Weights without optimiser state, config, split, metrics and log of one run → ``out/name.tar.gz``."""
    import torch

    best = run_dir / "checkpoints" / "best.ckpt"
    if best.is_file():
        state = torch.load(best, map_location="cpu", weights_only=False)  # our own checkpoint, just written
        torch.save({"state_dict": state["state_dict"], "hyper_parameters": dict(state["hyper_parameters"]),
                    "epoch": state.get("epoch")}, run_dir / "model.pt")
    with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
        for file in ["model.pt", "config.yaml", "split.json", "metrics.json", "fit.log"]:
            if (run_dir / file).is_file():
                tar.add(run_dir / file, arcname=f"{name}/{file}")
        for log in sorted(run_dir.glob("logs/**/metrics.csv"))[-1:]:
            tar.add(log, arcname=f"{name}/metrics.csv")


def main(argv: list[str] | None = None) -> int:
    """Build the graphs, probe, train all runs at once, pack their results; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wall", type=float, default=540.0,
                        help="seconds for the whole script: graphs, probe, training (all runs at once) and packing")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated run names")
    parser.add_argument("--root", type=Path, default=Path("runs/mp-gpu"))
    parser.add_argument("--data", help="the mp36k CSV, when not where the configs say")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="processes that build the graphs")
    parser.add_argument("--limit", type=int, help="smoke test of this script: the first N structures, small batches")
    args = parser.parse_args(argv)
    extra = ["--data.limit", str(args.limit), "--data.num_workers", "0", "--data.batch_size", "16"
             ] if args.limit else []
    extra += ["--data.path", args.data] if args.data else []
    threads = max(os.cpu_count() // len(args.runs.split(",")), 1)
    extra += ["--data.workers", str(args.workers), "--threads", str(threads)]
    args.out.mkdir(parents=True, exist_ok=True)
    args.root.mkdir(parents=True, exist_ok=True)
    names = args.runs.split(",")
    t0 = time.time()
    for config in sorted({RUNS[n][0] for n in names}):  # build the graph caches, one config at a time
        cmd = [sys.executable, "-c", "import sys, json; from benchmarks.crystal_mp_gpu import build_cache; "
               "build_cache(sys.argv[1], json.loads(sys.argv[2]))", config, json.dumps(extra)]
        subprocess.run(cmd, check=True)
    print(f"graphs cached in {time.time() - t0:.0f} s", flush=True)
    probes = {}
    procs = {n: _spawn([sys.executable, "-c", "import sys, pathlib, json; from benchmarks.crystal_mp_gpu import "
                        "probe; probe(sys.argv[1], json.loads(sys.argv[2]), pathlib.Path(sys.argv[3]))",
                        RUNS[n][0], json.dumps(RUNS[n][1] + extra), str(args.root / f"{n}.probe.json")],
                       args.root / f"{n}.probe.log") for n in names}
    for n, p in procs.items():
        if p.wait() != 0:
            print((args.root / f"{n}.probe.log").read_text()[-3000:], flush=True)
            raise SystemExit(f"probe of {n} failed")
        probes[n] = json.loads((args.root / f"{n}.probe.json").read_text())
    budget = (args.wall - (time.time() - t0) - RESERVE) * SAFETY  # training seconds each run plans for
    plan = {}
    for n, p in probes.items():
        epoch = p["s_per_step"] * (p["steps_per_epoch"] + 0.4 * p["val_steps"])
        plan[n] = {"epochs": max(int(budget / epoch), 1), "s_per_epoch_estimate": epoch, "budget_s": budget, **p}
    (args.out / "plan.json").write_text(json.dumps(plan, indent=1))
    print(json.dumps(plan, indent=1), flush=True)
    procs = {}
    for n in names:
        config, overrides = RUNS[n]
        run_dir = args.root / n
        cmd = [sys.executable, "-m", "sciml", "fit", "--config", config, *overrides, *extra, "--run_dir", str(run_dir),
               "--fresh",
               "--trainer.max_epochs", str(plan[n]["epochs"]), "--trainer.enable_progress_bar", "false"]
        run_dir.mkdir(parents=True, exist_ok=True)
        procs[n] = _spawn(cmd, run_dir / "fit.log")
    deadline = t0 + args.wall - RESERVE / 2  # a run still going then is stopped; its best.ckpt is kept
    for n, p in procs.items():
        try:
            rc = p.wait(timeout=max(deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            p.terminate()  # SIGTERM: Lightning stops at the next batch
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        run_dir = args.root / n
        log = (run_dir / "fit.log").read_text()
        print(f"--- {n}: exit {rc} after {time.time() - t0:.0f} s\n{log[-1500:]}", flush=True)
        brace = log.rfind("\n{")
        if rc == 0 and brace >= 0:
            (run_dir / "metrics.json").write_text(log[brace + 1:])
        try:
            _pack(n, run_dir, args.out)
        except Exception as err:  # keep the other runs' results
            print(f"packing {n} failed: {type(err).__name__}: {err}", flush=True)
    return 0


def build_cache(config: str, overrides: list[str]) -> None:
    """Build (or find) the graph cache of ``config``'s data with its settings."""
    from sciml.cli.config import load_run_config
    from sciml.crystal.task import datamodule

    datamodule(load_run_config(config, overrides))


if __name__ == "__main__":
    raise SystemExit(main())
