"""Kept freed memory (``sciml.core.allocator``) against glibc's defaults, on the README's perturbation command.

The same command runs with ``SCIML_KEEP_FREED_MEMORY=0`` (glibc's adaptive mmap/trim thresholds) and without it
(fixed thresholds), alternating run by run so that both see the same machine load. Per run: wall seconds (parent
clock), user and system CPU seconds (``RUSAGE_CHILDREN``) and the outputs' largest absolute difference (the
setting must not change a generated value). Medians, ranges and the per-pair wall ratio are reported.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/allocator.py [--repeats 3]

Writes ``benchmarks/results/allocator.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sciml.core.allocator import ENV

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "allocator.json"
COMMAND = ["perturbation", "predict", "--model", "checkpoints/grn-default", "--control",
           "examples/cells/grn_control.h5ad", "--perturbations", "G001+G002,G003", "--n-cells", "200"]


def run_once(keep: bool, out: Path) -> dict:
    """One run of the command; wall, user and system seconds."""
    env = os.environ | {"OMP_NUM_THREADS": "1", ENV: "1" if keep else "0"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "sciml"), *COMMAND, "--output", str(out)], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": wall, "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime}


def summary(values: list[float]) -> dict:
    """Median, minimum and maximum."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    """Alternate the two settings, write the JSON, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import anndata as ad
    import numpy as np

    runs = {"kept": [], "glibc_default": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, keep in (("kept", True), ("glibc_default", False)):
                runs[name].append(run_once(keep, Path(tmp) / f"{name}.h5ad"))
        diff = float(np.abs(ad.read_h5ad(Path(tmp) / "kept.h5ad").X - ad.read_h5ad(Path(tmp) / "glibc_default.h5ad").X)
                     .max())
    ratios = [k["wall"] / d["wall"] for k, d in zip(runs["kept"], runs["glibc_default"], strict=True)]
    result = {"command": "sciml " + " ".join(COMMAND), "threads": 1, "repeats": args.repeats,
              "machine": platform.machine(), "cpus": os.cpu_count(), "load_average_after": list(os.getloadavg()),
              "max_abs_output_difference": diff, "wall_ratio_kept_over_default": summary(ratios),
              **{name: {k: summary([r[k] for r in rs]) for k in ("wall", "user", "sys")} for name, rs in runs.items()}}
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
    write_json(RESULTS, result)
    for name in runs:
        print(f"{name:14s} wall {result[name]['wall']['median']:.2f} s  sys {result[name]['sys']['median']:.2f} s")
    print(f"kept / default wall: {result['wall_ratio_kept_over_default']['median']:.2f}; outputs differ by {diff:g}")


if __name__ == "__main__":
    main()
