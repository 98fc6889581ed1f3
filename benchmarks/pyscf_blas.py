"""pyscf on the kernel its bundled OpenBLAS detects against the AVX2 kernel sciml loads it with, side by side.

:mod:`sciml.hamiltonian.scf.blas` imports pyscf with ``OPENBLAS_CORETYPE=Haswell`` where the bundled OpenBLAS is too
old to know the CPU. This script measures what that buys, each probe in a fresh interpreter (the kernel is chosen
when the library loads), one thread, the two modes alternating over ``--rounds`` rounds:

- ``detected``: ``import pyscf`` first, so the library picks its kernel itself;
- ``sciml``: through ``sciml.hamiltonian.scf.h0.import_pyscf`` (the forced kernel where the rule applies).

Per probe, on uracil (12 atoms, 132 AOs, PBE/def2-SVP):

- ``dgemm_gflops``: ``pyscf.lib.dot`` of (20000, 132) by (132, 132), best of 5;
- ``h0_seconds``: the fast H0 with S (what ``predict`` builds per molecule);
- ``scf_seconds``: the reference SCF (``run_molecule_scf``, default settings: exact Coulomb, grid 3, conv_tol 1e-10,
  what ``benchmarks/hamiltonian_speed.py`` times);
- ``engine_seconds``: the data engine's QM9 settings (density fitting, grid 1, the final grid-3 build).

The converged H of the two modes must agree to rounding (``h_max_diff_microhartree``). Ratios are medians over
rounds of detected / sciml. Writes ``benchmarks/results/pyscf_blas.json``. Usage::

    python benchmarks/pyscf_blas.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "pyscf_blas.json"
MODES = ("detected", "sciml")

PROBE = r"""
import json, sys, time, numpy as np
if sys.argv[1] == "detected":
    import pyscf.lib
from sciml.hamiltonian.scf.h0 import import_pyscf, zeroth_step_matrices
import_pyscf()
from pyscf import lib
from sciml.hamiltonian.data.gen_molecules import builtin_molecule
from sciml.hamiltonian.data.generate import SCFSettings, pyscf_molecule, run_molecule_scf
from sciml.hamiltonian.scf.blas import pyscf_blas_core
lib.num_threads(1)
a, b = np.random.default_rng(0).random((20000, 132)), np.random.default_rng(1).random((132, 132))
times = []
for _ in range(5):
    t = time.perf_counter(); lib.dot(a, b); times.append(time.perf_counter() - t)
numbers, positions = builtin_molecule("uracil")
mol = pyscf_molecule(numbers, positions, "def2-svp")
t = time.perf_counter(); zeroth_step_matrices(mol, "pbe", method="fast"); h0 = time.perf_counter() - t
ref = run_molecule_scf(numbers, positions, SCFSettings(threads=1, h0="fast"))
engine = SCFSettings(threads=1, density_fit=True, grid_level=1, final_build=True, h0="fast")
eng = run_molecule_scf(numbers, positions, engine)
np.save(sys.argv[2], ref["mats"]["H"])
print(json.dumps({"core": pyscf_blas_core(), "dgemm_gflops": 2 * 20000 * 132 * 132 / min(times) / 1e9,
                  "h0_seconds": h0, "scf_seconds": ref["scf_seconds"], "scf_cycles": ref["scf_cycles"],
                  "engine_seconds": eng["scf_seconds"], "engine_cycles": eng["scf_cycles"]}))
"""
KEYS = ("dgemm_gflops", "h0_seconds", "scf_seconds", "engine_seconds")


def probe(mode: str, h_path: Path) -> dict:
    """One fresh interpreter in ``mode``; its measurements (and its converged H saved to ``h_path``)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"} | {"OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE, mode, str(h_path)], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    """Alternate the two modes over the rounds, print and write the medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--output", default=str(RESULTS))
    args = ap.parse_args(argv)
    runs = {mode: [] for mode in MODES}
    diffs = []
    tmp = Path(args.output).with_suffix(".tmp-h")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                runs[mode].append(probe(mode, tmp / f"{mode}.npy"))
                print(mode, runs[mode][-1], flush=True)
            diffs.append(float(np.abs(np.load(tmp / "detected.npy") - np.load(tmp / "sciml.npy")).max() * 1e6))
    finally:
        for f in tmp.glob("*.npy"):
            f.unlink()
        tmp.rmdir()
    ratios = {k: float(np.median([d[k] / s[k] for d, s in zip(runs["detected"], runs["sciml"], strict=True)]))
              for k in KEYS}
    ratios["dgemm_gflops"] = 1 / ratios["dgemm_gflops"]  # every ratio: how many times faster the sciml mode is
    result = {"command": "python benchmarks/pyscf_blas.py " + " ".join(argv or sys.argv[1:]),
              "what": __doc__.split("\n\n")[0], "molecule": "uracil (built-in), PBE/def2-SVP, one thread",
              "cores": {mode: runs[mode][0]["core"] for mode in MODES}, "runs": runs,
              "sciml_speedup_median": ratios, "h_max_diff_microhartree": max(diffs),
              "cpu": platform.processor() or platform.machine(), "load_average": list(os.getloadavg())}
    write_json(Path(args.output), result)
    print(json.dumps({"cores": result["cores"], "speedup": ratios, "h_diff_uha": max(diffs)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
