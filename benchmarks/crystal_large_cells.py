"""Prediction time and peak memory of the crystal model on large cells (supercells of a shipped perovskite).

Each size runs in a fresh Python process (1 thread) that loads the model, builds the supercell of
``examples/structures/SrTiO3.cif`` and predicts it with :func:`sciml.crystal.predict.predict` (interval and domain
p-value included). Reported: atoms, reflections, seconds of the ``predict`` call, and the process's peak resident
memory (``ru_maxrss``, imports and model included). Writes ``benchmarks/results/crystal_large_cells.json``, one
section per model.

Usage::

    python benchmarks/crystal_large_cells.py [--model perov5-heat-all] [--sizes 64,512,1000,2000,4096,5000]

A size ``n`` is a near-cubic supercell ``a×b×c`` of the 5-atom cell with ``5abc`` close to ``n`` (the JSON has both).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from _results import results_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "crystal_large_cells.json"
CELL = ROOT / "examples" / "structures" / "SrTiO3.cif"


def supercell_shape(n_atoms: int, per_cell: int = 5) -> tuple[int, int, int]:
    """Near-cubic ``(a, b, c)`` with ``per_cell·abc`` close to ``n_atoms`` (relative miss + 5% per unit of c/a)."""
    target = n_atoms / per_cell
    best = min(itertools.combinations_with_replacement(range(1, 25), 3),
               key=lambda s: abs(s[0] * s[1] * s[2] - target) / target + 0.05 * (s[2] / s[0] - 1))
    return tuple(sorted(best, reverse=True))


def one(model: str, shape: tuple[int, int, int]) -> dict:
    """Measure one supercell in this process and return its row."""
    import resource
    import time

    import torch
    from pymatgen.core import Structure

    from sciml.crystal.predict import load_model, predict

    torch.set_num_threads(1)
    predictor = load_model(model)
    structure = Structure.from_file(CELL).make_supercell(list(shape), in_place=False)
    start = time.perf_counter()
    frame = predict([structure], predictor)
    seconds = time.perf_counter() - start
    from sciml.core.neighbors import reciprocal_hkl

    n_refl = len(reciprocal_hkl(structure.lattice.matrix, predictor.graph.g_max))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {"atoms": len(structure), "supercell": list(shape), "reflections": n_refl, "seconds": round(seconds, 2),
            "peak_rss_gib": round(peak / 2**30, 3), "prediction": float(frame.iloc[0, 3])}


def main() -> None:
    """Run each size in a fresh process and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="perov5-heat-all")
    parser.add_argument("--sizes", default="64,512,1000,2000,4096,5000")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a×b×c: measure in this process, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.model, tuple(int(k) for k in args.one.split("x")))))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with results_file(RESULTS, header={"threads": 1, "cell": CELL.name,
                                       "command": "python benchmarks/crystal_large_cells.py --model MODEL"},
                      section=args.model) as results:  # one section per model
        for size in (int(s) for s in args.sizes.split(",")):
            shape = supercell_shape(size)
            out = subprocess.run([sys.executable, __file__, "--model", args.model, "--one", "x".join(map(str, shape))],
                                 env=env, check=True, capture_output=True, text=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            results[str(size)] = row
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
