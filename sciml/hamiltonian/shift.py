r"""Shift-aware orbital-energy intervals for a batch of molecules (``hamiltonian predict --shift-aware``).

Weighted split conformal (Tibshirani, Barber, Candès, Ramdas 2019): the density ratio ``w(x) = p_batch/p_cal``
is estimated on whitened embeddings by a cross-fitted classifier of "batch" against the calib-split structures
stored in ``domain.json`` (:func:`sciml.uq.weighted.density_ratio`); for each orbital group (Mondrian by orbital,
:func:`sciml.hamiltonian.domain.orbital_groups`) the threshold of a batch molecule is the weighted quantile of the
group's normalised calibration scores with the molecule's own weight on ``+∞``
(:func:`sciml.uq.weighted.weighted_conformal_threshold`). Weights are per structure, so every group of a
structure shares them.

Effective-sample-size guard: when the Kish ESS of the calibration weights is below
``max((1-α)/α, min(min_ess, n_cal/2))`` every threshold is ``+∞`` (no claim rather than false confidence):
``(1-α)/α`` is the smallest set with a finite plain quantile, ``min_ess`` bounds the coverage noise of large
calibration sets (:mod:`sciml.uq.weighted`), ``n_cal/2`` keeps a small set usable unless weighting halves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sciml.uq.weighted import density_ratio, effective_sample_size, weighted_conformal_threshold

__all__ = ["MIN_BATCH", "ShiftThresholds", "shift_thresholds"]

MIN_BATCH = 5  # the classifier is cross-fitted in 5 folds


@dataclass(frozen=True)
class ShiftThresholds:
    """Per-orbital thresholds of one batch (normalised-score units) and the diagnostics.

    Attributes
    ----------
    thresholds : torch.Tensor
        ``(Σ n_eig,)``; ``+inf`` where guarded or where the orbital group has no calibration score.
    ess, ess_floor : float
        Effective sample size of the calibration weights and the floor it was held to.
    guarded : bool
        ``True`` when ``ess < ess_floor`` (every threshold ``+inf``).

    """

    thresholds: Tensor
    ess: float
    ess_floor: float
    guarded: bool


def shift_thresholds(domain, batch_emb: Tensor, rows: Tensor, groups: Tensor, alpha: float,
                     min_ess: float = 50.0) -> ShiftThresholds:
    """Weighted conformal thresholds of every orbital of a batch (module docstring).

    Parameters
    ----------
    domain : HamiltonianDomain
        The artifact's domain state (whitening, calibration embeddings, rows, groups, normalised scores).
    batch_emb : torch.Tensor
        Raw embeddings of the batch molecules ``(m, d)``, ``m >= MIN_BATCH``.
    rows, groups : torch.Tensor
        Molecule (row of ``batch_emb``) and orbital group of each predicted orbital, int64 ``(K,)``.
    alpha : float
        Miscoverage.
    min_ess : float
        ESS floor of large calibration sets.

    """
    m = batch_emb.shape[0]
    if m < MIN_BATCH:
        raise ValueError(f"--shift-aware compares the batch with the calibration data and needs at least "
                         f"{MIN_BATCH} molecules, got {m}; predict more molecules together or drop --shift-aware")
    if min_ess < 0:
        raise ValueError(f"--min-ess must be >= 0, got {min_ess}")
    w_cal, w_test = density_ratio(domain.shift_emb, domain.project(batch_emb), seed=domain.seed)
    n_cal = len(w_cal)
    ess, floor = effective_sample_size(w_cal), max((1 - alpha) / alpha, min(float(min_ess), n_cal / 2))
    q = torch.full((len(rows),), math.inf, dtype=torch.float64)
    if ess < floor:
        return ShiftThresholds(q, ess, floor, True)
    for g in torch.unique(groups).tolist():
        cal = domain.shift_groups == g
        if not cal.any():
            continue
        out = groups == g
        per_mol = weighted_conformal_threshold(domain.shift_scores[cal], w_cal[domain.shift_rows[cal]], w_test, alpha)
        q[out] = per_mol[rows[out]]
    return ShiftThresholds(q, ess, floor, False)
