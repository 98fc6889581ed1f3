r"""Shift-aware intervals for a batch of crystals: weighted split conformal against the batch (``--shift-aware``).

The density ratio ``w(x) = p_batch(x)/p_cal(x)`` is estimated on embeddings by a cross-fitted classifier of
"batch" against the calibration subset stored in ``domain.json`` (:func:`sciml.uq.weighted.density_ratio`),
and each structure's threshold is the weighted conformal quantile of the calibration scores with its own
weight on ``+∞`` (Tibshirani et al. 2019, :func:`sciml.uq.weighted.weighted_conformal_threshold`).

With a Mondrian calibrator (cell-size bins of :mod:`sciml.crystal.calibration`) the weighted quantile is taken
within each group: the ratio is estimated once on the whole batch (the within-group ratio differs from it by a
constant per group, which the normalised weights cancel), and the scores and weights of the group's
calibration rows give the thresholds of the group's batch rows.

Effective-sample-size guard, per calibration group (:func:`sciml.uq.weighted.grouped_weighted_thresholds`):
a group whose calibration weights have too small an effective sample size gets infinite intervals. No claim
rather than false confidence.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sciml.uq.weighted import GroupedThresholds, density_ratio, grouped_weighted_thresholds

__all__ = ["shift_thresholds"]

MIN_BATCH = 5  # the classifier is cross-fitted in 5 folds


def shift_thresholds(domain, batch_emb: Tensor, batch_groups: Tensor | None, alpha: float,
                     min_ess: float = 50.0) -> GroupedThresholds:
    """Weighted conformal thresholds of a batch (module docstring), ``(m,)`` in score units.

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
        ESS floor of large groups.

    """
    m = batch_emb.shape[0]
    if m < MIN_BATCH:
        raise ValueError(f"--shift-aware compares the batch with the calibration data and needs at least "
                         f"{MIN_BATCH} structures, got {m}; predict more structures together or drop --shift-aware")
    w_cal, w_test = density_ratio(domain.shift_emb, batch_emb.double(), seed=domain.seed)
    cal_groups = domain.shift_groups if domain.shift_groups is not None else torch.zeros(len(w_cal), dtype=torch.long)
    groups = batch_groups if batch_groups is not None else torch.zeros(m, dtype=torch.long)
    return grouped_weighted_thresholds(domain.shift_scores, w_cal, cal_groups, w_test, groups, alpha, min_ess)
