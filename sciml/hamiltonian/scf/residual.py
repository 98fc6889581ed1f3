r"""SCF residual of a predicted Hamiltonian: an error estimate that needs no reference calculation.

A closed-shell Kohn–Sham Hamiltonian ``H`` fixes its orbitals (``H C = S C ε``) and so a density
``D = 2 C_occ C_occᵀ``; the Fock matrix of that density, ``F[D]``, equals ``H`` at self-consistency (the fixed point
the SCF iterates to; the DIIS error ``F D S − S D F`` vanishes with it). The residual

    r(H) = mean_ij |F[D(H)]_ij − H_ij|    (µHa, pyscf AO order)

is zero at the SCF solution and, near it, grows with the error ``δH`` of a prediction: to first order
``F[D(H + δH)] − (H + δH) = (χ − 1) δH`` with ``χ`` the density response of the Kohn–Sham potential. It costs one
Fock build, made the way the model's H0 is (:func:`sciml.hamiltonian.scf.h0.fock_solver`, ``h0`` method of the
model), i.e. about as much as H0 itself.

:class:`ResidualBound` turns it into a bound on the H MAE of a new molecule by split conformal prediction on the
ratio ``err / r`` (Vovk et al. 2005; Lei et al. 2018): the score of a calibration molecule is the largest ratio over
its conformers, so ``q · r(H)`` bounds the H MAE of every conformer of a new molecule with probability ≥ 1 − α when
the molecule is drawn like the calibration molecules (exchangeable by molecule, as ``split.by: molecule`` makes them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from sciml.uq.quantile import check_alpha, conformal_quantile

RESIDUAL_FILE = "residual.json"


def scf_residual(numbers, positions, h_pyscf: np.ndarray, basis: str, xc: str, h0: str = "full",
                 grid_level: int = 3, source: str = "input") -> float:
    """``r(H)`` in µHa (module docstring) of ``h_pyscf`` (nao, nao; pyscf AO order, Hartree).

    ``numbers`` (N,), ``positions`` (N, 3) Å; ``h0``: how F is built (the model's H0 method); ``source`` names the
    molecule in errors.
    """
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver
    from sciml.hamiltonian.scf.refine import density_matrix

    mol = gto.M(atom=[(int(z), tuple(map(float, p))) for z, p in zip(numbers, positions, strict=True)],
                basis=basis, unit="Angstrom", verbose=0)
    if h_pyscf.shape != (mol.nao, mol.nao):
        raise ValueError(f"{source}: H has shape {h_pyscf.shape}; basis {basis!r} gives {mol.nao} orbitals for this "
                         "molecule")
    mf = fock_solver(mol, xc, grid_level, h0)
    dens = density_matrix(h_pyscf, mf.get_ovlp(), mol.nelectron // 2)
    return float(np.abs(mf.get_fock(dm=dens) - h_pyscf).mean() * 1e6)


@dataclass
class ResidualBound:
    """Conformal bound ``q · r(H)`` on the H MAE of a prediction (µHa), fitted on calibration molecules.

    Attributes
    ----------
    alpha : default miscoverage (the bound holds with probability ≥ 1 − alpha for a new molecule).
    scores : per calibration molecule, the largest ``H MAE / r(H)`` over its conformers.
    molecules : their names (same order).

    """

    alpha: float
    scores: list[float]
    molecules: list[str] = field(default_factory=list)

    def quantile(self, alpha: float | None = None) -> float:
        """``q``: the ``⌈(n+1)(1−α)⌉``-th smallest score (``α``: the fitted one by default); ``inf`` if too few."""
        level = self.alpha if alpha is None else alpha
        return float(conformal_quantile(torch.tensor(self.scores, dtype=torch.float64), level))

    def bound(self, residual: float, alpha: float | None = None) -> float:
        """Bound on the H MAE (µHa) of a prediction whose residual is ``residual`` (µHa), at level ``1 − α``."""
        return self.quantile(alpha) * residual

    @classmethod
    def fit(cls, ratios: dict[str, list[float]], alpha: float = 0.1) -> ResidualBound:
        """From ``{molecule: [H MAE / r(H) per conformer]}``; a molecule's score is its largest ratio."""
        check_alpha(alpha)
        bad = [m for m, r in ratios.items() if not r or not np.all(np.isfinite(r)) or min(r) < 0]
        if bad:
            raise ValueError(f"calibration molecules {bad} have no finite, non-negative error/residual ratios")
        names = sorted(ratios)
        return cls(float(alpha), [float(max(ratios[m])) for m in names], names)

    def to_dict(self) -> dict:
        return {"alpha": self.alpha, "scores": self.scores, "molecules": self.molecules}

    @classmethod
    def from_dict(cls, data: dict) -> ResidualBound:
        scores = [float(s) for s in data["scores"]]
        if not scores or not all(math.isfinite(s) and s >= 0 for s in scores):
            raise ValueError("scores must be a non-empty list of finite, non-negative numbers")
        return cls(float(data["alpha"]), scores, [str(m) for m in data.get("molecules", [])])


@dataclass(frozen=True)
class ResidualCheck:
    """The SCF residual of one prediction and, with a fitted :class:`ResidualBound`, its bound on the H MAE.

    Attributes
    ----------
    residual : ``r(H)``, µHa.
    bound : ``q · r(H)``, µHa; None without ``residual.json`` or with too few calibration molecules at ``alpha``.
    alpha : the level of the bound (None without ``residual.json``).
    text : one sentence saying what the bound means (empty without ``residual.json``).

    """

    residual: float
    bound: float | None = None
    alpha: float | None = None
    text: str = ""


def check_residual(residual: float, fitted: ResidualBound | None, alpha: float | None) -> ResidualCheck:
    """:class:`ResidualCheck` of a prediction whose residual is ``residual`` (µHa).

    ``fitted``: the artifact's bound (``residual.json``) or None; ``alpha``: level of the bound (the fitted one by
    default).
    """
    if fitted is None:
        return ResidualCheck(residual)
    level = fitted.alpha if alpha is None else alpha
    bound = fitted.bound(residual, level)
    text = (f"SCF residual {residual:.0f} µHa: H MAE <= {bound:.0f} µHa with probability >= {1 - level:.2f} for "
            f"molecules drawn like the {len(fitted.scores)} calibration molecules" if math.isfinite(bound) else
            f"SCF residual {residual:.0f} µHa: too few calibration molecules ({len(fitted.scores)}) for an H MAE "
            f"bound at alpha {level:g}")
    return ResidualCheck(residual, bound if math.isfinite(bound) else None, level, text)
