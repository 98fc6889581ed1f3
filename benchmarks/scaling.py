"""Memory and throughput of ``sciml crystal predict`` as the number of input files grows.

Generates N structure files by randomly perturbing the shipped example perovskites (lattice strain up to 3 %,
atomic displacements with σ = 0.05 Å, seeded), then runs the real command line on the folder in a child process
and reads the child's peak resident set size from ``wait4``. Streaming prediction should give a peak RSS that does
not grow with N: the JSON reports the ratio peak(20 000) / peak(2 000) beside the one-file baseline (imports and
model only), all measured in this run.

Usage::

    python benchmarks/scaling.py [--sizes 2000 20000] [--threads 1] [--workdir runs/scaling]

Writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from sciml.core.structures import read_structure

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "structures"
MODEL = ROOT / "checkpoints" / "perov5-heat-all"


def write_perturbed(folder: Path, n: int, seed: int = 0) -> float:
    """Write ``n`` perturbed copies of the example structures as POSCAR files; return seconds taken."""
    from pymatgen.io.vasp import Poscar

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    bases = [read_structure(p) for p in sorted(EXAMPLES.iterdir())]
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        s = bases[k % len(bases)].copy()
        s.apply_strain(rng.uniform(-0.03, 0.03, size=3))
        s.perturb(0.05)  # pymatgen draws its own random directions; the strain above is seeded
        Poscar(s).write_file(folder / f"s{k:06d}.vasp")
    return time.perf_counter() - start


def run_predict(inputs: Path, output: Path, threads: int) -> dict:
    """Run ``sciml crystal predict`` in a child process; return wall time, peak RSS (MiB) and row count."""
    cmd = [sys.executable, "-m", "sciml.cli.main", "crystal", "predict", "--model", str(MODEL), str(inputs),
           "--output", str(output), "--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"sciml crystal predict failed on {inputs}: {stderr.strip()[-500:]}")
    n_rows = sum(1 for line in output.read_text().splitlines()[1:] if line) - 1  # comment and header lines
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "rows": n_rows,
            "structures_per_s": round(n_rows / wall, 1)}


def main() -> None:
    """Generate the folders, run the command on each, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workdir", default=str(ROOT / "runs" / "scaling"))
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    args = parser.parse_args()

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    results = {"one_file": run_predict(EXAMPLES / "SrTiO3.cif", work / "one.csv", args.threads)}
    for n in args.sizes:
        folder = work / f"n{n}"
        gen_s = write_perturbed(folder, n)
        results[str(n)] = run_predict(folder, work / f"n{n}.csv", args.threads) | {"generate_s": round(gen_s, 1)}
        if results[str(n)]["rows"] != n:
            raise RuntimeError(f"expected {n} prediction rows, got {results[str(n)]['rows']}")
        print(n, results[str(n)], flush=True)
        shutil.rmtree(folder)
    small, large = (results[str(n)]["peak_rss_mib"] for n in (min(args.sizes), max(args.sizes)))
    summary = {"peak_rss_ratio_largest_over_smallest": round(large / small, 3),
               "peak_rss_growth_mib": round(large - small, 1),
               "model_and_imports_rss_mib": results["one_file"]["peak_rss_mib"]}
    out = {"command": "sciml crystal predict --model checkpoints/perov5-heat-all DIR --output out.csv",
           "threads": args.threads, "sizes": args.sizes, "results": results, "summary": summary}
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
    write_json(args.output, out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
