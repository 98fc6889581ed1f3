r"""Shift-aware intervals for a batch of crystals: weighted split conformal against the batch (``--shift-aware``).

The density ratio ``w(x) = p_batch(x)/p_cal(x)`` is estimated on embeddings by a cross-fitted classifier of
"batch" against the calibration subset stored in ``domain.json`` (:func:`sciml.uq.weighted.density_ratio`),
and each structure's threshold is the weighted conformal quantile of the calibration scores with its own
weight on ``+∞`` (Tibshirani et al. 2019, :func:`sciml.uq.weighted.weighted_conformal_threshold`).

With a Mondrian calibrator (cell-size bins of :mod:`sciml.crystal.calibration`) the weighted quantile is taken
within each group: the ratio is estimated once on the whole batch (the within-group ratio differs from it by a
constant per group, which the normalised weights cancel), and the scores and weights of the group's
calibration rows give the thresholds of the group's batch rows.

Effective-sample-size guard, per calibration group of ``n_g`` rows: when the Kish ESS of the group's
calibration weights is below ``max((1-α)/α, min(min_ess, n_g/2))``, every threshold of the group is ``+∞``.
``(1-α)/α`` is the smallest calibration set with a finite plain quantile; ``min_ess`` (default 50) bounds the
coverage noise of a large group (:mod:`sciml.uq.weighted`); ``n_g/2`` keeps a small group, which has fewer than
``min_ess`` rows even without shift, usable unless the weighting halves it. No claim rather than false confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sciml.uq.weighted import density_ratio, effective_sample_size, weighted_conformal_threshold

__all__ = ["ShiftResult", "shift_thresholds"]

MIN_BATCH = 5  # the classifier is cross-fitted in 5 folds


@dataclass(frozen=True)
class ShiftResult:
    """Thresholds of one batch and the diagnostics behind them.

    Attributes
    ----------
    thresholds : torch.Tensor
        ``(m,)`` in score units; ``+inf`` where guarded or where the group has no calibration row.
    ess : dict
        Effective sample size of each calibration group present in the batch (``{group: ess}``; key 0 for
        split calibrators).
    guarded : list
        Groups whose thresholds were set to ``+inf`` by the ESS guard.

    """

    thresholds: Tensor
    ess: dict
    guarded: list


def shift_thresholds(domain, batch_emb: Tensor, batch_groups: Tensor | None, alpha: float,
                     min_ess: float = 50.0) -> ShiftResult:
    """Weighted conformal thresholds of a batch (module docstring).

    Parameters
    ----------
    domain : sciml.crystal.domain.CrystalDomain
        The artifact's domain state (calibration embeddings, scores and groups).
    batch_emb : torch.Tensor
        Embeddings of the batch ``(m, d)``, ``m >= 5``.
    batch_groups : torch.Tensor or None
        Mondrian group of each batch row ``(m,)`` int64 (``None`` for split calibrators).
    alpha : float
        Miscoverage.
    min_ess : float
        ESS floor of large groups (module docstring).

    """
    m = batch_emb.shape[0]
    if m < MIN_BATCH:
        raise ValueError(f"--shift-aware compares the batch with the calibration data and needs at least "
                         f"{MIN_BATCH} structures, got {m}; predict more structures together or drop --shift-aware")
    if min_ess < 0:
        raise ValueError(f"min_ess must be >= 0, got {min_ess}")
    w_cal, w_test = density_ratio(domain.shift_emb, batch_emb.double(), seed=domain.seed)
    cal_groups = domain.shift_groups if domain.shift_groups is not None else torch.zeros(len(w_cal), dtype=torch.long)
    groups = batch_groups if batch_groups is not None else torch.zeros(m, dtype=torch.long)
    q = torch.full((m,), math.inf, dtype=torch.float64)
    ess, guarded = {}, []
    for g in sorted(set(groups.tolist())):
        cal, rows = cal_groups == g, groups == g
        if not cal.any():
            continue  # a group never calibrated has no bound
        ess[g] = effective_sample_size(w_cal[cal])
        if ess[g] < max((1 - alpha) / alpha, min(min_ess, int(cal.sum()) / 2)):
            guarded.append(g)
            continue
        q[rows] = weighted_conformal_threshold(domain.shift_scores[cal], w_cal[cal], w_test[rows], alpha)
    return ShiftResult(q, ess, guarded)
