"""Orbital-energy intervals of a batch of molecules, of the calibrator kind the artifact holds.

Pooled split conformal, or Mondrian by orbital (HOMO −1, LUMO 0, ...; :mod:`sciml.hamiltonian.domain`) with widths
scaled by ``σ(x)`` for the normalised score; ``shift_aware``: weighted conformal against the batch
(:mod:`sciml.hamiltonian.shift`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sciml.hamiltonian.artifact import HamiltonianPredictor
from sciml.hamiltonian.domain import orbital_groups, outside_groups

__all__ = ["BatchIntervals", "orbital_intervals"]


@dataclass
class BatchIntervals:
    """Orbital-energy intervals of a batch (Hartree, ``(K,)``) and what they mean.

    Attributes
    ----------
    lower, upper : ``(K,)`` Hartree, the interval ends of every orbital of the batch (NaN without intervals).
    method : how they were made, in words (``"none"`` without a calibrator or ``alpha``).
    note : batch-level note (the shift-aware ESS guard), empty when none.
    borrowed : ``(K,)`` bool, orbitals deeper than the deepest Mondrian calibration group (they take its width);
        None for pooled intervals.

    """

    lower: torch.Tensor
    upper: torch.Tensor
    method: str
    note: str = ""
    borrowed: torch.Tensor | None = None


def orbital_intervals(predictor: HamiltonianPredictor, eps: torch.Tensor, batch, emb: torch.Tensor | None,
                      alpha: float | None, shift_aware: bool = False, min_ess: float = 50.0) -> BatchIntervals:
    """Intervals of the calibrator kind the artifact holds (pooled split; Mondrian by orbital, normalised by σ(x)).

    ``shift_aware``: weighted conformal against the batch (:mod:`sciml.hamiltonian.shift`), ``+inf`` under the
    ESS guard. ``emb``: raw embeddings ``(G, d)`` (needed by normalised and shift-aware intervals).
    """
    cal = predictor.calibrator
    nan = torch.full_like(eps, math.nan)
    if cal is None or alpha is None:
        if shift_aware:
            raise ValueError(f"{predictor.path}: --shift-aware needs a calibrated model")
        return BatchIntervals(nan, nan, "none")
    rows = torch.repeat_interleave(torch.arange(int(batch.num_graphs)), batch.n_eig)
    if getattr(cal, "method", None) != "mondrian":
        if shift_aware:
            raise ValueError(f"{predictor.path}: --shift-aware needs a model exported with a domain test "
                             "(domain.json, per-orbital calibrator); re-export it or drop --shift-aware")
        interval = cal.predict_set(eps, alpha=alpha)
        return BatchIntervals(interval.lower, interval.upper, "split conformal, pooled over orbitals")
    groups = orbital_groups(batch.n_eig, batch.n_occ, cal.group_ids)
    sigma = (predictor.domain.sigma(emb)[rows] if cal.score_name == "normalized" else torch.ones_like(eps))
    if shift_aware:
        from sciml.hamiltonian.shift import shift_thresholds

        res = shift_thresholds(predictor.domain, emb, rows, groups, alpha, min_ess)
        q, method = res.thresholds, "weighted conformal against the batch, per orbital"
        note = (f"shift-aware: effective sample size {res.ess:.1f} of the calibration weights is below "
                f"{res.ess_floor:.1f}: the guarded orbitals' intervals are infinite (no claim rather than false "
                "confidence)"
                if res.guarded else "")
    else:
        q, method, note = cal.threshold_or_inf(groups, alpha), "split conformal, Mondrian by orbital", ""
    half = q * sigma
    scaled = ", normalised by σ(x)" if cal.score_name == "normalized" else ""
    return BatchIntervals(eps - half, eps + half, method + scaled, note,
                          outside_groups(batch.n_eig, batch.n_occ, cal.group_ids))
