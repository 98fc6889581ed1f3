r"""Group-conditional coverage for *overlapping* groups: the max-over-groups conformal threshold.

Mondrian calibration (:mod:`sciml.uq.mondrian`) needs disjoint groups. With overlapping groups (crystal system
*and* anion, cell type *and* batch) a point belongs to several groups ``g ∈ G(x)``. Calibrating each group on
its own members, ``q_g = Q_{1-α}(\{s_i : g ∈ G(x_i)\} ∪ \{∞\})``, and using

.. math::  q(x) = \max_{g \in G(x)} q_g

gives, for every group ``g``, ``P(Y ∈ C(X) | g ∈ G(X)) >= P(s <= q_g | g ∈ G(X)) >= 1 - α``: the members of
``g`` are exchangeable with a test member of ``g``, and ``C(x)`` contains ``g``'s own set. This is
conservative (the max over-covers in intersections). The sharper conditional calibration of Gibbs, Cherian
and Candès (2023), quantile regression on the group indicators with an augmented test score, reaches
``1 - α`` exactly in every group; it is not implemented here. A point in no calibrated group gets ``+inf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import check_calibrator_dict, check_scores, float_list, is_int, resize_buffers
from .quantile import check_alpha, conformal_quantile
from .scores import get_score
from .sets import PredictionSet
from .split import CALIBRATORS

__all__ = ["MultiGroupConformal", "members_from_lists", "members_to_lists"]


def _check_members(members: Tensor, n: int | None = None) -> Tensor:
    ok = isinstance(members, Tensor) and members.dtype == torch.bool and members.dim() == 2
    if not ok or (n is not None and members.shape[0] != n):
        raise ValueError(f"group membership must be a bool tensor of shape ({n or 'm'}, G), one column per group")
    return members


class MultiGroupConformal(nn.Module):
    """Max-over-groups split conformal for overlapping groups (module docstring).

    Buffers: ``scores`` ``(n,)`` calibration scores and ``members`` ``(n, G)`` bool memberships; thresholds are
    recomputed for any ``alpha``. Parameters ``score`` and ``alpha`` as in :class:`~sciml.uq.split.SplitConformal`;
    ``group_by`` optionally names group functions of :data:`sciml.uq.groups.GROUP_FUNCTIONS` (for model code),
    and ``columns`` (set by :meth:`fit`) labels each group column ``(function name, value)``.
    """

    method = "multigroup"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, group_by: list[str] | None = None) -> None:
        super().__init__()
        self.score_fn, self.score_name, self.alpha = get_score(score), score, check_alpha(alpha)
        names_ok = isinstance(group_by, list | tuple) and all(isinstance(g, str) for g in group_by)
        if group_by is not None and not names_ok:
            raise ValueError(f"'group_by' must be None or a list of group-function names, got {group_by!r}")
        self.group_by = None if group_by is None else list(group_by)
        self.columns: list[tuple[str, int]] = []
        self.register_buffer("scores", torch.empty(0, dtype=torch.float64))
        self.register_buffer("members", torch.empty(0, 0, dtype=torch.bool))

    def fit(self, scores: Tensor, members: Tensor, columns: list[tuple[str, int]] | None = None) -> MultiGroupConformal:
        """Store ``scores`` ``(n,)`` and bool ``members`` ``(n, G)`` (optional column labels, one per group)."""
        check_scores(scores)
        members = _check_members(members, scores.numel())
        if columns is not None and len(columns) != members.shape[1]:
            raise ValueError(f"{len(columns)} column labels for {members.shape[1]} groups")
        self.scores, self.members = scores.detach().double(), members.clone()
        self.columns = [] if columns is None else [(str(n), int(v)) for n, v in columns]
        return self

    def fit_predictions(self, pred: Tensor, y: Tensor, members: Tensor, sigma: Tensor | None = None,
                        columns: list[tuple[str, int]] | None = None) -> MultiGroupConformal:
        """Score predictions ``pred``, targets ``y`` (and ``sigma``), then :meth:`fit`."""
        return self.fit(self.score_fn.score(pred, y, sigma), members, columns)

    def group_thresholds(self, alpha: float | None = None) -> Tensor:
        """``q_g`` for every group, ``(G,)`` float64 (``+inf`` for a group with too few members)."""
        if self.scores.numel() == 0:
            raise RuntimeError("MultiGroupConformal is not fitted; call fit(scores, members) first")
        alpha = self.alpha if alpha is None else alpha
        return torch.stack([conformal_quantile(self.scores[self.members[:, g]], alpha)
                            for g in range(self.members.shape[1])])

    def threshold(self, members: Tensor, alpha: float | None = None) -> Tensor:
        """``q(x) = max_{g ∈ G(x)} q_g``, shape ``(m,)``; ``+inf`` for a point in no group."""
        q_g = self.group_thresholds(alpha)
        members = _check_members(members)
        if members.shape[1] != q_g.numel():
            raise ValueError(f"membership has {members.shape[1]} groups, the calibrator {q_g.numel()}")
        q = torch.where(members, q_g.unsqueeze(0), torch.full_like(q_g, -math.inf).unsqueeze(0)).max(-1).values
        return torch.where(members.any(-1), q, torch.full_like(q, math.inf))

    def predict_set(self, pred: Tensor, members: Tensor, sigma: Tensor | None = None,
                    alpha: float | None = None) -> PredictionSet:
        """Set ``{y : s(pred_i, y) <= q(x_i)}`` for ``pred`` ``(m,)`` and membership ``(m, G)``."""
        return self.score_fn.predict_set(pred, self.threshold(members, alpha).to(pred.dtype), sigma)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        resize_buffers(self, state_dict, prefix, ("scores", "members"))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``method, score, alpha, group_by, columns, scores, members`` (group indices of each score)."""
        self.group_thresholds()
        return {"method": self.method, "score": self.score_name, "alpha": self.alpha, "group_by": self.group_by,
                "columns": [list(c) for c in self.columns], "scores": [float(v) for v in self.scores.tolist()],
                "members": members_to_lists(self.members)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MultiGroupConformal:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "score", "alpha", "group_by", "columns", "scores", "members"}, cls.method)
        scores = float_list(d["scores"], "scores")
        members, columns = members_from_lists(d["members"], d["columns"], len(scores))
        return cls(d["score"], d["alpha"], d["group_by"]).fit(torch.tensor(scores, dtype=torch.float64), members,
                                                               columns)


def members_to_lists(members: Tensor) -> list[list[int]]:
    """JSON form of memberships ``(n, G)`` bool: the group indices of each row."""
    return [torch.nonzero(row).flatten().tolist() for row in members]


def members_from_lists(rows: Any, columns: Any, n: int) -> tuple[Tensor, list[tuple[str, int]]]:
    """Memberships ``(n, G)`` and column labels from :func:`members_to_lists` output; ``ValueError`` if malformed."""
    if not isinstance(columns, list) or not all(
            isinstance(c, list) and len(c) == 2 and is_int(c[1]) for c in columns):
        raise ValueError("'columns' must be a list of [group-function name, integer value] pairs")
    if not isinstance(rows, list) or len(rows) != n:
        raise ValueError("'members' must hold one list of group indices per calibration point")
    members = torch.zeros(n, len(columns), dtype=torch.bool)
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not all(is_int(j) and 0 <= j < len(columns) for j in row):
            raise ValueError(f"'members'[{i}] must be a list of group indices in [0, {len(columns)})")
        members[i, row] = True
    return members, [tuple(c) for c in columns]


CALIBRATORS[MultiGroupConformal.method] = MultiGroupConformal
