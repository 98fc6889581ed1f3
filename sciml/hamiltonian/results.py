"""Typed results of molecule prediction: what :func:`sciml.hamiltonian.predict.predict_structures` returns.

A :class:`MoleculePrediction` carries the predicted ``H``, the orbital energies with their conformal intervals,
the domain verdict and, when asked for, the refinement (:class:`RefineRecord`) and the SCF residual
(:class:`~sciml.hamiltonian.scf.residual.ResidualCheck`). Energies are in Hartree; the writer
(:mod:`sciml.hamiltonian.write`) adds eV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sciml.hamiltonian.scf.refine import DEFAULT_METHOD
from sciml.hamiltonian.scf.residual import ResidualCheck

__all__ = ["Gap", "MoleculePrediction", "RefineRecord"]


@dataclass(frozen=True)
class Gap:
    """HOMO, LUMO, the HOMO–LUMO gap and its interval (Hartree).

    The interval combines the HOMO and LUMO intervals, ``[lo_L − hi_H, hi_L − lo_H]``, so it covers with
    probability ≥ 1 − 2α (Bonferroni) when each orbital interval covers with ≥ 1 − α.
    """

    homo: float
    lumo: float
    gap: float
    lower: float
    upper: float


@dataclass(frozen=True)
class RefineRecord:
    """How a prediction was refined (:mod:`sciml.hamiltonian.scf.refine`).

    Attributes
    ----------
    steps : Fock builds made.
    residuals : mean ``|F[D(H_i)] − H_i|`` (µHa) of each evaluated iterate ``H_0 … H_{steps−1}``.
    last_change : ``(k,)`` Hartree, each orbital's ``ε_K − ε_{K−1}``: its change in the last build.
    method : how each build became a step (``"newton"`` or ``"anderson"``).

    """

    steps: int
    residuals: list[float]
    last_change: np.ndarray
    method: str = DEFAULT_METHOD


@dataclass(frozen=True)
class MoleculePrediction:
    """One molecule's predicted Hamiltonian, orbital energies with intervals, and what they mean.

    Attributes
    ----------
    source : the input it came from (``file.xyz``, ``file.xyz@k`` for frame ``k``).
    hamiltonian : ``(nao, nao)`` Hartree, e3nn orbital order (:meth:`OrbitalLayout.to_pyscf` for pyscf's).
    orbital_energies, lower, upper : ``(k,)`` Hartree, the lowest ``k`` orbitals and their interval ends (NaN
        without a calibrator, ``±inf`` where the calibration set is too small).
    n_occupied : doubly occupied orbitals.
    alpha : miscoverage of the intervals (None: no intervals asked for).
    domain_pvalue, in_domain, domain_beta : the domain test's p-value, ``p > β`` and ``β`` (None for models
        without ``domain.json``); ``in_domain`` is False for a molecule larger than every training molecule
        (:mod:`sciml.hamiltonian.sizes`), whatever its p-value.
    intervals : how the intervals were made, in words (``"none"`` without).
    interval_guarantee : whether the conformal guarantee applies (calibrated, in domain, no guard).
    note : one line of caveats, empty when there are none.
    refined : the refinement, when the prediction was refined.
    residual : the SCF residual and its bound, when asked for.

    """

    source: str
    hamiltonian: np.ndarray
    orbital_energies: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n_occupied: int
    alpha: float | None
    domain_pvalue: float | None
    in_domain: bool | None
    domain_beta: float | None
    intervals: str
    interval_guarantee: bool
    note: str = ""
    refined: RefineRecord | None = None
    residual: ResidualCheck | None = None

    @property
    def gap(self) -> Gap | None:
        """HOMO, LUMO and gap with its interval; None when no virtual orbital was predicted."""
        occ, eps, lo, hi = self.n_occupied, self.orbital_energies, self.lower, self.upper
        if len(eps) <= occ:
            return None
        return Gap(float(eps[occ - 1]), float(eps[occ]), float(eps[occ] - eps[occ - 1]), float(lo[occ] - hi[occ - 1]),
                   float(hi[occ] - lo[occ - 1]))

    @property
    def homo(self) -> float:
        """Energy of the highest occupied orbital (Hartree)."""
        return float(self.orbital_energies[self.n_occupied - 1])

    def with_note(self, text: str, **changes) -> MoleculePrediction:
        """A copy with ``text`` appended to :attr:`note` (``"; "`` between) and the fields ``changes`` replaced."""
        note = f"{self.note}; {text}" if self.note and text else (self.note or text)
        return replace(self, note=note, **changes)
