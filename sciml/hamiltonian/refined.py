"""A molecule prediction refined by ``K`` self-consistent Fock builds, with the intervals that hold for it.

The refinement is :func:`sciml.hamiltonian.scf.refine.refine` with the Fock builds of
:func:`sciml.hamiltonian.scf.molecule.zeroth_step` (``cache_mb`` > 0). Intervals come from the artifact's refined
calibrator when it was fitted for the same ``K`` and method (:mod:`sciml.hamiltonian.scf.refine_calibration`: a
guarantee like the unrefined one); otherwise each orbital keeps its unrefined width around the refined energy,
marked without guarantee.
"""

from __future__ import annotations

import math

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.results import MoleculePrediction, RefineRecord
from sciml.hamiltonian.scf.molecule import ZerothStep
from sciml.hamiltonian.scf.refine import DEFAULT_METHOD
from sciml.hamiltonian.scf.refine_calibration import RefinedCalibration, core_orbitals

__all__ = ["refine_prediction"]


def refine_prediction(result: MoleculePrediction, numbers, step: ZerothStep, layout: OrbitalLayout,
                      calibration: RefinedCalibration | None, steps: int, alpha: float | None,
                      method: str = DEFAULT_METHOD) -> MoleculePrediction:
    """``result`` after ``steps`` Fock builds ``step.fock`` (released after), with intervals (module docstring).

    Parameters
    ----------
    result : MoleculePrediction
        The network's prediction of the molecule.
    numbers : array of int
        Its atomic numbers ``(n,)``.
    step : ZerothStep
        Its overlap and Fock builds (:func:`~sciml.hamiltonian.scf.molecule.zeroth_step` with ``cache_mb`` > 0).
    layout : OrbitalLayout
        The model's orbital layout (e3nn ↔ pyscf order).
    calibration : RefinedCalibration or None
        The artifact's refined calibrator (``refine_calibrator.json``).
    steps : int
        Fock builds, ≥ 1.
    alpha : float or None
        Miscoverage of the intervals (None: no intervals).
    method : str
        How each build becomes a step (:data:`sciml.hamiltonian.scf.refine.METHODS`).

    Returns
    -------
    MoleculePrediction
        H, orbital energies, intervals and gap of the refined H; :attr:`~MoleculePrediction.refined` says how.

    """
    from scipy.linalg import eigh

    from sciml.hamiltonian.scf.refine import refine

    if steps < 1:
        raise ValueError(f"{result.source}: refinement needs at least one Fock build, got {steps}")
    occ, s_pyscf = result.n_occupied, step.overlap
    start = layout.to_pyscf(result.hamiltonian, numbers)
    out = refine(start, step.fock, s_pyscf, occ, steps, method=method, keep_history=True)
    step.fock.release()
    k = len(result.orbital_energies)
    eps, before = (eigh(h, s_pyscf, eigvals_only=True)[:k] for h in (out.hamiltonian, ([start] + out.history)[-2]))
    text = f"refined by {steps} Fock builds, {method} steps (last residual {out.residuals[-1]:.0f} µHa)"
    if alpha is None:
        lo = hi = np.full(k, math.nan)
        intervals, guarantee = "none", False
    elif calibration is not None and (calibration.steps, calibration.method) == (steps, method):
        lo, hi = calibration.intervals(eps, eps - before, occ, alpha, core_orbitals(numbers))
        scaled = ", scaled by each orbital's change in the last build" if calibration.floor is not None else ""
        core = " (core orbitals one group)" if calibration.core else ""
        intervals = f"split conformal, Mondrian by orbital{core}{scaled}, refined by {steps} Fock builds ({method})"
        guarantee = result.in_domain is not False
    else:
        shift = eps - result.orbital_energies
        lo, hi = result.lower + shift, result.upper + shift
        intervals, guarantee = result.intervals + ", widths of the unrefined model", False
        text += ("; intervals keep the unrefined model's widths (no guarantee for refined energies: the model has "
                 f"no refined calibrator for {steps} {method} builds)")
    record = RefineRecord(steps, out.residuals, eps - before, method)
    return result.with_note(text, hamiltonian=layout.to_e3nn(out.hamiltonian, numbers), orbital_energies=eps,
                            lower=lo, upper=hi, intervals=intervals, interval_guarantee=guarantee, refined=record)
