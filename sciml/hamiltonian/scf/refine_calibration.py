r"""Conformal intervals for refined predictions (``predict --refine K``), fitted on calibration molecules.

The artifact's own calibrator describes the network's errors; after ``K`` self-consistent Fock builds
(:mod:`sciml.hamiltonian.scf.refine`) the errors are much smaller, so those widths say nothing about them.
:class:`RefinedCalibration` is a Mondrian-by-orbital split-conformal calibrator (Vovk 2012; groups HOMO −1, LUMO 0,
...; the deepest pooled until each can give a finite width, :func:`sciml.hamiltonian.domain.pool_deep_groups`)
on the normalised errors of refined predictions of held-out calibration molecules

    s = |ε_K − ε_ref| / (|ε_K − ε_{K−1}| + m),

with ``ε_K − ε_{K−1}`` the orbital's change in the last build (an iteration that has not converged yet is still
moving) and ``m`` the median of that change over the calibration orbitals (so that a converged orbital keeps a
width of the typical size). The interval is ``ε_K ± q_g (|ε_K − ε_{K−1}| + m)``. The core orbitals (the lowest
``Σ chemcore(Z)`` of each molecule, 1s of C/N/O) form one group of their own (``CORE_GROUP``): counted from the
HOMO they would share a group with valence orbitals of larger molecules, and their refined errors are larger. It
is stored as ``refine_calibrator.json`` and used by ``predict --refine K`` with the same ``K`` and refinement
method; the intervals then hold for molecules drawn like the calibration molecules, as the unrefined ones do. Why
this score and the core group (leave-one-molecule-out on the organic model's calibration molecules):
``docs/hamiltonian.md``. A file without ``floor`` holds the absolute score; one without ``core`` groups core
orbitals from the HOMO like the others. It is fitted by :func:`sciml.hamiltonian.calibrate.add_refine_calibration`
(``sciml hamiltonian calibrate --operation refine``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from sciml.hamiltonian.scf.refine import DEFAULT_METHOD, METHODS

REFINE_FILE = "refine_calibrator.json"
CORE_GROUP = 1000  # Mondrian group of core orbitals; above every HOMO-relative group, so never pooled with deep ones


def core_orbitals(numbers) -> int:
    """Number of core orbitals of a molecule: ``Σ chemcore(Z)`` (pyscf's frozen-core count; 1 for B–Ne)."""
    from pyscf.data.elements import chemcore_atm

    return int(sum(chemcore_atm[int(z)] for z in numbers))


def refined_groups(n_eig: int, n_occ: int, n_core: int, known: torch.Tensor | None = None) -> torch.Tensor:
    """``(n_eig,)`` Mondrian groups of one molecule's refined orbitals, the lowest ``n_core`` in ``CORE_GROUP``.

    The others as :func:`~sciml.hamiltonian.domain.orbital_groups` (HOMO −1, LUMO 0); ``known``: the calibrated
    groups (clamping as there).
    """
    from sciml.hamiltonian.domain import orbital_groups

    valence = None if known is None else known[known != CORE_GROUP]
    groups = orbital_groups(torch.tensor([n_eig]), torch.tensor([n_occ]), valence)
    groups[:min(n_core, n_occ)] = CORE_GROUP
    return groups


@dataclass
class RefinedCalibration:
    """A per-orbital calibrator of predictions refined by ``steps`` Fock builds.

    Attributes
    ----------
    steps : the ``K`` of ``predict --refine K`` it was fitted for.
    calibrator : :class:`sciml.uq.mondrian.MondrianConformal` on the normalised score (module docstring), or on
        the absolute one (Hartree) when ``floor`` is None.
    molecules : the calibration molecules.
    floor : ``m``, Hartree: the median last-build change of the calibration orbitals.
    core : whether core orbitals have their own group (``CORE_GROUP``); False in files without the field.
    method : the refinement it was fitted for (:data:`sciml.hamiltonian.scf.refine.METHODS`); ``"anderson"`` in
        files without the field.

    """

    steps: int
    calibrator: torch.nn.Module
    molecules: list[str] = field(default_factory=list)
    floor: float | None = None
    core: bool = False
    method: str = DEFAULT_METHOD

    def to_dict(self) -> dict:
        return {"steps": self.steps, "method": self.method, "calibrator": self.calibrator.to_dict(),
                "molecules": self.molecules, "floor": self.floor, "core": self.core}

    @classmethod
    def from_dict(cls, data: dict) -> RefinedCalibration:
        from sciml.uq.split import calibrator_from_dict

        steps = int(data["steps"])
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        floor = data.get("floor")
        if floor is not None and not (math.isfinite(floor) and floor > 0):
            raise ValueError(f"floor must be a finite number > 0 (Hartree), got {floor}")
        method = str(data.get("method", "anderson"))
        if method not in METHODS:
            raise ValueError(f"unknown refinement method {method!r}; use one of {', '.join(METHODS)}")
        return cls(steps, calibrator_from_dict(data["calibrator"]), [str(m) for m in data.get("molecules", [])],
                   None if floor is None else float(floor), bool(data.get("core", False)), method)

    def scale(self, change: np.ndarray) -> np.ndarray:
        """``|ε_K − ε_{K−1}| + m`` (Hartree) of the last-build changes ``change`` (ones for the absolute score)."""
        return np.ones_like(change) if self.floor is None else np.abs(change) + self.floor

    def intervals(self, eps: np.ndarray, change: np.ndarray, n_occupied: int, alpha: float,
                  n_core: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends (Hartree, ``(k,)``) around refined orbital energies ``eps`` of one molecule.

        ``change``: ``ε_K − ε_{K−1}`` (Hartree, ``(k,)``), each orbital's change in the last Fock build.
        ``n_core``: its core orbitals (:func:`core_orbitals`), used when the calibrator has a core group.
        """
        cal = self.calibrator
        groups = refined_groups(len(eps), n_occupied, n_core if self.core else 0, cal.group_ids)
        half = cal.threshold_or_inf(groups, alpha).double().numpy() * self.scale(change)
        return eps - half, eps + half
