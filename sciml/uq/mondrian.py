r"""Mondrian (group-conditional) split conformal: one conformal quantile per group.

With ``n_g`` calibration scores in group ``g`` the threshold is ``q_g = Q_{1-α}(S_g ∪ {∞})``, the
``k_g = ⌈(n_g+1)(1-α)⌉``-th smallest score of the group, ``+inf`` when ``k_g > n_g``. For scores exchangeable
within each group, ``P(Y ∈ C(X) | G = g) >= 1 - α`` for every group, with mean ``k_g/(n_g+1)`` for
continuous scores (Vovk, Gammerman, Shafer 2005, *Algorithmic Learning in a Random World*, Mondrian
conformal predictors). Groups are disjoint integer labels (class,
crystal system, cell type). Overlapping groups: :class:`~sciml.uq.multigroup.MultiGroupConformal` (max over
the groups' thresholds, coverage >= 1-α in every group, conservative); the exact conditional calibration of
Gibbs, Cherian, Candès (2023) is not provided.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import check_calibrator_dict, check_scores, float_list, is_int, prepare_state_load
from .quantile import check_alpha, conformal_quantile
from .scores import get_score
from .sets import PredictionSet
from .split import CALIBRATORS

__all__ = ["MondrianConformal"]

_BUFFERS = ("scores", "group_ids", "counts")


def _check_groups(groups: Tensor, n: int) -> None:
    bad_dtype = not isinstance(groups, Tensor) or groups.is_floating_point() or groups.is_complex()
    if bad_dtype or groups.dtype == torch.bool or groups.shape != (n,):
        raise ValueError(f"groups must be a 1-D integer tensor of shape ({n},), one label per score")


class MondrianConformal(nn.Module):
    """Group-conditional split conformal calibrator.

    State (buffers, travels in ``state_dict``): ``group_ids`` ``(G,)`` int64 sorted distinct groups,
    ``counts`` ``(G,)`` int64 scores per group, ``scores`` ``(n,)`` sorted by group then by score.

    Parameters
    ----------
    score : str
        Name of a score in :data:`sciml.uq.scores.SCORES`, used by :meth:`predict_set`. For other scores
        (CQR, classification) fit on their scores and call ``score.predict_set(pred, cal.threshold(groups))``.
    alpha : float
        Default miscoverage in ``(0, 1)``.

    """

    method = "mondrian"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, group_by: str | None = None) -> None:
        super().__init__()
        self.score_fn = get_score(score)
        self.score_name = score
        self.alpha = check_alpha(alpha)
        if group_by is not None and not isinstance(group_by, str):
            raise ValueError(f"'group_by' must be None or the name of a group function, got {group_by!r}")
        self.group_by = group_by  # name in sciml.uq.groups.GROUP_FUNCTIONS, for model code (not used here)
        self.register_buffer("scores", torch.empty(0))
        self.register_buffer("group_ids", torch.empty(0, dtype=torch.int64))
        self.register_buffer("counts", torch.empty(0, dtype=torch.int64))

    @property
    def n_groups(self) -> int:
        """Number of calibrated groups ``G`` (0 before :meth:`fit`)."""
        return self.group_ids.numel()

    def fit(self, scores: Tensor, groups: Tensor) -> MondrianConformal:
        """Store calibration ``scores`` ``(n,)`` (finite, float) with their integer ``groups`` ``(n,)``."""
        check_scores(scores)
        _check_groups(groups, scores.numel())
        scores, groups = scores.detach(), groups.to(device=scores.device, dtype=torch.int64)
        ids, inverse, counts = torch.unique(groups, return_inverse=True, return_counts=True)
        by_score = torch.argsort(scores, stable=True)
        order = by_score[torch.argsort(inverse[by_score], stable=True)]  # group-major, score-minor
        device = self.scores.device
        self.scores, self.group_ids, self.counts = scores[order].to(device), ids.to(device), counts.to(device)
        return self

    def fit_predictions(
        self, pred: Tensor, y: Tensor, groups: Tensor, sigma: Tensor | None = None
    ) -> MondrianConformal:
        """Score calibration predictions ``pred``, targets ``y`` (and ``sigma``), all ``(n,)``, then fit."""
        return self.fit(self.score_fn.score(pred, y, sigma), groups)

    def group_index(self, groups: Tensor) -> Tensor:
        """Position of each group label in ``group_ids``; ``ValueError`` naming any uncalibrated group."""
        if not isinstance(groups, Tensor) or groups.is_floating_point() or groups.dtype == torch.bool:
            raise ValueError("groups must be an integer tensor")
        groups = groups.to(device=self.group_ids.device, dtype=torch.int64)
        idx = torch.searchsorted(self.group_ids, groups).clamp_max(max(self.n_groups - 1, 0))
        known = self.group_ids[idx] == groups if self.n_groups else torch.zeros_like(groups, dtype=torch.bool)
        if not known.all():
            unknown = torch.unique(groups[~known]).tolist()
            raise ValueError(
                f"unknown group(s) {unknown[:10]}; calibrated groups: {self.group_ids.tolist()[:20]}"
            )
        return idx

    def threshold(self, groups: Tensor | None = None, alpha: float | None = None) -> Tensor:
        """Return ``q_g``, shape ``(G,)`` in ``group_ids`` order, or one per entry of ``groups`` if given."""
        if self.n_groups == 0:
            raise RuntimeError("MondrianConformal is not fitted; call fit(scores, groups) first")
        alpha = self.alpha if alpha is None else alpha
        per_group = torch.stack(
            [conformal_quantile(s, alpha) for s in self.scores.split(self.counts.tolist())]
        )
        return per_group if groups is None else per_group[self.group_index(groups)]

    def threshold_or_inf(self, groups: Tensor, alpha: float | None = None) -> Tensor:
        """Like :meth:`threshold` for ``groups`` ``(m,)``, but ``+inf`` (the whole line) for uncalibrated groups."""
        groups = groups.to(device=self.group_ids.device, dtype=torch.int64)
        known = torch.isin(groups, self.group_ids)
        out = torch.full(groups.shape, float("inf"), dtype=self.scores.dtype, device=self.scores.device)
        if known.any():
            out[known] = self.threshold(groups[known], alpha)
        return out

    def predict_set(
        self, pred: Tensor, groups: Tensor, sigma: Tensor | None = None, alpha: float | None = None
    ) -> PredictionSet:
        """Set ``{y : s(pred_i, y, sigma_i) <= q_{g_i}}`` for ``pred`` and ``groups`` of shape ``(m,)``."""
        return self.score_fn.predict_set(pred, self.threshold(groups, alpha), sigma)

    def forward(
        self, pred: Tensor, groups: Tensor, sigma: Tensor | None = None, alpha: float | None = None
    ) -> PredictionSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(pred, groups, sigma, alpha)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        s, ids, counts = (state_dict.get(prefix + name) for name in _BUFFERS)
        if all(isinstance(t, Tensor) for t in (s, ids, counts)):
            ok = s.dim() == ids.dim() == counts.dim() == 1 and ids.shape == counts.shape
            ok = ok and not (ids.is_floating_point() or counts.is_floating_point())
            ok = ok and int(counts.sum()) == s.numel() and bool((counts > 0).all())
            if not (ok and bool((ids[1:] > ids[:-1]).all())):
                args[-1].append(f"{prefix}: inconsistent Mondrian state (scores, group_ids, counts)")
                return
        if prepare_state_load(self, state_dict, prefix, _BUFFERS, args[-1]):  # args[-1]: error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "score", "alpha", "groups", "scores"}`` (+ ``group_by`` if set)."""
        if self.n_groups == 0:
            raise RuntimeError("MondrianConformal is not fitted; call fit(scores, groups) before to_dict")
        chunks = self.scores.split(self.counts.tolist())
        out = {
            "method": self.method,
            "score": self.score_name,
            "alpha": self.alpha,
            "groups": [int(g) for g in self.group_ids.tolist()],
            "scores": [[float(s) for s in c.tolist()] for c in chunks],
        }
        return out if self.group_by is None else out | {"group_by": self.group_by}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MondrianConformal:
        """Rebuild from :meth:`to_dict` output (scores as float64); ``ValueError`` on any malformed field."""
        keys = {"method", "score", "alpha", "groups", "scores"}
        check_calibrator_dict(d, keys | ({"group_by"} if isinstance(d, Mapping) and "group_by" in d else set()),
                              cls.method)
        groups, chunks = d["groups"], d["scores"]
        if not isinstance(groups, list | tuple) or not all(is_int(g) for g in groups):
            raise ValueError("'groups' must be a list of integers")
        if len(set(groups)) != len(groups) or not groups:
            raise ValueError("'groups' must be a non-empty list of distinct integers")
        if not isinstance(chunks, list | tuple) or len(chunks) != len(groups):
            raise ValueError("'scores' must be a list with one list of scores per group")
        chunks = [float_list(c, "scores") for c in chunks]
        if not all(chunks):
            raise ValueError("'scores' has an empty group; every group needs at least one score")
        scores = torch.tensor([s for c in chunks for s in c], dtype=torch.float64)
        labels = torch.tensor([g for g, c in zip(groups, chunks, strict=True) for _ in c], dtype=torch.int64)
        return cls(score=d["score"], alpha=d["alpha"], group_by=d.get("group_by")).fit(scores, labels)


CALIBRATORS[MondrianConformal.method] = MondrianConformal
