"""Torch threads of a predict verb: the default against one thread and all cores → ``benchmarks/results/threads.json``.

One command (default: the README's perturbation predict) runs with three thread settings: the default
(:func:`sciml.core.threads.choose_threads`: ``OMP_NUM_THREADS`` unset, so the cores not busy over the last
minute), ``--threads 1`` and ``--threads <all cores>``; first on a quiet machine, then while a busy loop (another
process) holds one core. The default reads the 1-minute load average, so the quiet phase waits until it is below
0.5 and the busy phase until it has risen by 0.75 (each at most ``--warmup`` seconds; the load averages at the
start and end of each phase are recorded). Wall time of fresh processes, median of ``--repeats``, interleaved.

Usage::

    python benchmarks/threads.py [--command perturbation|crystal] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "perturbation": ["perturbation", "predict", "--control", "examples/cells/grn_control.h5ad", "--perturbations",
                     "G001+G002,G003", "--n-cells", "200", "--output", "{tmp}/pred.h5ad"],
    "crystal": ["crystal", "predict", "examples/structures", "--output", "{tmp}/preds.csv"],
}
BUSY = "while True: pass"


def run_once(argv: list[str], threads: int | None) -> dict:
    """Wall seconds and the thread count the command reported, in a fresh process without OMP_NUM_THREADS."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cmd = [sys.executable, "-m", "sciml.cli.main", *argv] + ([] if threads is None else ["--threads", str(threads)])
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    used = re.search(r"(\d+) thread\(s\)", proc.stderr)
    return {"wall_s": wall, "threads": int(used.group(1)) if used else None}


def phase(argv: list[str], cores: int, repeats: int) -> dict:
    """The three settings, interleaved ``repeats`` times; median wall seconds and the threads each used."""
    settings = {"default": None, "threads_1": 1, f"threads_{cores}": cores}
    runs = {name: [] for name in settings}
    load = [os.getloadavg()[0]]
    for _ in range(repeats):
        for name, threads in settings.items():
            runs[name].append(run_once(argv, threads))
    load.append(os.getloadavg()[0])
    return {"load_average_1min_start_end": [round(x, 2) for x in load]} | {
        name: {"median_s": round(statistics.median(r["wall_s"] for r in rs), 2),
               "runs_s": [round(r["wall_s"], 2) for r in rs], "threads_used": sorted({r["threads"] for r in rs})}
        for name, rs in runs.items()}


def wait_for_load(done, limit: float) -> float:
    """Seconds waited until ``done(load)`` holds for the 1-minute load average (or ``limit`` seconds passed)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit and not done(os.getloadavg()[0]):
        time.sleep(2)
    return time.perf_counter() - start


def main() -> None:
    """Measure both phases and write the results once, at the end."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", choices=sorted(COMMANDS), default="perturbation")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=120.0, help="most seconds to wait for the load average")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "threads.json"))
    args = parser.parse_args()
    from sciml.core.threads import usable_cores

    cores = usable_cores()
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.format(tmp=tmp) for a in COMMANDS[args.command]]
        waited = wait_for_load(lambda load: load < 0.5, args.warmup)
        quiet = phase(argv, cores, args.repeats) | {"waited_s": round(waited, 1)}
        print("quiet machine:", quiet, flush=True)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            base = os.getloadavg()[0]
            waited = wait_for_load(lambda load: load >= base + 0.75, args.warmup)
            one_busy = phase(argv, cores, args.repeats) | {"waited_s": round(waited, 1)}
        finally:
            busy.kill()
            busy.wait()
        print("one core busy:", one_busy, flush=True)
    result = {"command": "sciml " + " ".join(a.replace(tmp, "$TMP") for a in argv), "repeats": args.repeats,
              "rule": "--threads, else OMP_NUM_THREADS, else usable cores minus the rounded 1-minute load average "
                      "(at least 1): sciml.core.threads.choose_threads",
              "machine": {"cores": cores, "python": platform.python_version()},
              "quiet": quiet, "one_core_busy": one_busy}
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic

    write_json(args.output, result)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
