"""SCF baselines for the refined speed comparison: the density-fitted SCF and the SCF stopped when as good as ours.

A refined prediction is compared with three SCFs of the same conformer, one thread each:

- ``exact``: the reference SCF of ``sciml data hamiltonian`` (exact Coulomb, grid 3, conv_tol 1e-10), every cycle
  traced (wall time since the kernel began, mean |F_k − H| of the cycle's Fock matrix F_k = F[D_k] against the
  converged H);
- ``stopped``: that same SCF stopped at the first cycle whose F_k is as near the converged H as the prediction is
  (its H MAE against the same H): the time an SCF needs to be as accurate, read from the trace;
- ``density_fit``: the SCF with density-fitted Coulomb (pyscf's default fitting basis), grid 3, conv_tol 1e-10.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np


@contextmanager
def traced_kernels(trace: list):
    """Append ``(seconds since the kernel began, F_k)`` of every SCF cycle run inside the block to ``trace``."""
    from pyscf.scf import hf

    original = hf.SCF.kernel

    def kernel(self, *args, **kwargs):
        start = time.perf_counter()
        self.callback = lambda env: trace.append((time.perf_counter() - start, np.array(env["fock"])))
        try:
            return original(self, *args, **kwargs)
        finally:
            self.callback = None

    hf.SCF.kernel = kernel
    try:
        yield
    finally:
        hf.SCF.kernel = original


def stopped_seconds(trace: list, h_final: np.ndarray, target_microhartree: float) -> tuple[float, int]:
    """Seconds and cycles until a traced SCF's F_k is within ``target`` (mean |F_k − H|, µHa) of its final H.

    The last cycle when none is (the converged SCF is then the baseline).
    """
    for cycle, (seconds, fock) in enumerate(trace, start=1):
        if np.abs(fock - h_final).mean() * 1e6 <= target_microhartree:
            return seconds, cycle
    return trace[-1][0], len(trace)


def density_fitted_scf(numbers, positions) -> dict:
    """Wall seconds, cycles and H (pyscf order) of the density-fitted SCF (module docstring), one thread."""
    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf

    res = run_molecule_scf(numbers, positions, SCFSettings(threads=1, density_fit=True))
    return {"seconds": res["scf_seconds"], "cycles": res["scf_cycles"], "H": res["mats"]["H"],
            "converged": res["converged"]}
