r"""Shift-aware orbital-energy intervals for a batch of molecules (``hamiltonian predict --shift-aware``).

Weighted split conformal (Tibshirani, Barber, Candès, Ramdas 2019): the density ratio ``w(x) = p_batch/p_cal``
is estimated on whitened embeddings by a cross-fitted classifier of "batch" against the calib-split structures
stored in ``domain.json`` (:func:`sciml.uq.weighted.density_ratio`); for each orbital group (Mondrian by orbital,
:func:`sciml.hamiltonian.domain.orbital_groups`) the threshold of a batch molecule is the weighted quantile of the
group's normalised calibration scores with the molecule's own weight on ``+∞``
(:func:`sciml.uq.weighted.weighted_conformal_threshold`). Weights are per structure, so every group of a
structure shares them.

Groups are guarded one by one by their effective sample size
(:func:`sciml.uq.weighted.grouped_weighted_thresholds`): infinite intervals rather than false confidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from sciml.uq.weighted import density_ratio, grouped_weighted_thresholds

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
        The smallest effective sample size of the calibration weights over the batch's orbital groups, and the
        floor it was held to.
    guarded : bool
        ``True`` when some orbital group was guarded (its thresholds ``+inf``).

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
    res = grouped_weighted_thresholds(domain.shift_scores, w_cal[domain.shift_rows], domain.shift_groups,
                                      w_test[rows], groups, alpha, min_ess)
    worst = min(res.ess, key=res.ess.get) if res.ess else None
    return ShiftThresholds(res.thresholds, res.ess.get(worst, 0.0), res.floors.get(worst, 0.0), bool(res.guarded))
