"""The data engine's CPU SCF kept state against pyscf's plain one, side by side on QM9 molecules.

Both run the engine's cheap QM9 settings (PBE/def2-SVP, density fitting, XC grid level 1, conv_tol 1e-10, one
thread, minao start) and then the same exact grid-3 Fock build of the converged density (what ``--final-build``
stores):

- ``plain``: pyscf as it comes (``mean_field(..., iterative=False)``): with a pure functional and density fitting
  it recomputes the three-centre integrals in every Coulomb build, and it evaluates the AOs on the grid every cycle;
- ``kept``: the engine's SCF (``iterative=True``): density-fitting factors built once, AO grid values kept between
  cycles (:class:`sciml.hamiltonian.scf.numint_cache.CachedNumInt`).

The two alternate per molecule (``kept`` first on odd positions) so the load of this shared machine falls on both.
Per molecule: seconds and cycles of each, their ratio, and the largest difference of the stored H (µHa). Writes
``benchmarks/results/hamiltonian_engine_speed.json``. Usage::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_engine_speed.py [--indices 4022 1189 5510]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "hamiltonian_engine_speed.json"


def stored_h(mol, settings, kept: bool) -> tuple[np.ndarray, float, int]:
    """The H ``--final-build`` stores, the SCF seconds and cycles, with or without the kept state."""
    from sciml.hamiltonian.data.generate import mean_field, reference_fock

    start = time.perf_counter()
    mf = mean_field(mol, settings, "cpu", iterative=kept)
    mf.kernel()
    seconds = time.perf_counter() - start
    return reference_fock(mol, settings, "cpu", mf.make_rdm1()), seconds, int(mf.cycles)


def main(argv=None) -> int:
    """Time both SCFs on every molecule, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--indices", type=int, nargs="+", default=[4022, 1189, 5510], help="QM9 indices")
    ap.add_argument("--output", default=str(RESULTS))
    args = ap.parse_args(argv)
    from sciml.hamiltonian.scf.blas import pyscf_blas_core
    from sciml.hamiltonian.scf.h0 import import_pyscf

    import_pyscf()
    from pyscf import lib

    from sciml.hamiltonian.data.generate import SCFSettings, pyscf_molecule
    from sciml.hamiltonian.data.qm9 import qm9_molecules

    lib.num_threads(1)
    settings = SCFSettings(density_fit=True, grid_level=1, final_build=True)
    rows = []
    for k, m in enumerate(qm9_molecules(args.indices)):
        mol = pyscf_molecule(m.numbers, m.positions, settings.basis)
        order = (True, False) if k % 2 else (False, True)
        runs = {kept: stored_h(mol, settings, kept) for kept in order}
        row = {"index": m.index, "formula": m.formula, "n_ao": int(mol.nao),
               "plain_seconds": round(runs[False][1], 2), "kept_seconds": round(runs[True][1], 2),
               "plain_cycles": runs[False][2], "kept_cycles": runs[True][2],
               "time_ratio": round(runs[True][1] / runs[False][1], 3),
               "h_max_diff_microhartree": float(np.abs(runs[True][0] - runs[False][0]).max() * 1e6)}
        rows.append(row)
        print(row, flush=True)
    result = {"command": "python benchmarks/hamiltonian_engine_speed.py " + " ".join(argv or sys.argv[1:]),
              "settings": "PBE/def2-SVP, density fitting, XC grid 1, conv_tol 1e-10, one thread, minao start",
              "molecules": rows, "median_time_ratio": float(np.median([r["time_ratio"] for r in rows])),
              "platform": platform.platform(), "pyscf_blas_core": pyscf_blas_core()}
    write_json(Path(args.output), result)
    print(f"median kept/plain time {result['median_time_ratio']:.2f}; wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
