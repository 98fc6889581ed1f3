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

import torch
from torch import Tensor, nn

from ._checks import check_scores
from .quantile import check_alpha, conformal_quantile
from .scores import get_score
from .sets import PredictionSet

__all__ = ["MultiGroupConformal"]


def _check_members(members: Tensor, n: int | None = None) -> Tensor:
    ok = isinstance(members, Tensor) and members.dtype == torch.bool and members.dim() == 2
    if not ok or (n is not None and members.shape[0] != n):
        raise ValueError(f"group membership must be a bool tensor of shape ({n or 'm'}, G), one column per group")
    return members


class MultiGroupConformal(nn.Module):
    """Max-over-groups split conformal for overlapping groups (module docstring).

    Buffer ``q`` ``(G,)``: the per-group thresholds at the default ``alpha`` (``+inf`` for a group with too
    few members). Parameters ``score`` and ``alpha`` as in :class:`~sciml.uq.split.SplitConformal`.
    """

    def __init__(self, score: str = "absolute", alpha: float = 0.1) -> None:
        super().__init__()
        self.score_fn, self.score_name, self.alpha = get_score(score), score, check_alpha(alpha)
        self.register_buffer("q", torch.empty(0, dtype=torch.float64))

    def fit(self, scores: Tensor, members: Tensor) -> MultiGroupConformal:
        """Per-group thresholds from ``scores`` ``(n,)`` and bool ``members`` ``(n, G)``."""
        check_scores(scores)
        members = _check_members(members, scores.numel())
        s = scores.detach().double()
        self.q = torch.stack([conformal_quantile(s[members[:, g]], self.alpha) for g in range(members.shape[1])])
        return self

    def threshold(self, members: Tensor) -> Tensor:
        """``q(x) = max_{g ∈ G(x)} q_g``, shape ``(m,)``; ``+inf`` for a point in no group."""
        if self.q.numel() == 0:
            raise RuntimeError("MultiGroupConformal is not fitted; call fit(scores, members) first")
        members = _check_members(members)
        if members.shape[1] != self.q.numel():
            raise ValueError(f"membership has {members.shape[1]} groups, the calibrator {self.q.numel()}")
        q = torch.where(members, self.q.unsqueeze(0), torch.full_like(self.q, -math.inf).unsqueeze(0)).max(-1).values
        return torch.where(members.any(-1), q, torch.full_like(q, math.inf))

    def predict_set(self, pred: Tensor, members: Tensor, sigma: Tensor | None = None) -> PredictionSet:
        """Set ``{y : s(pred_i, y) <= q(x_i)}`` for ``pred`` ``(m,)`` and membership ``(m, G)``."""
        return self.score_fn.predict_set(pred, self.threshold(members).to(pred.dtype), sigma)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        incoming = state_dict.get(prefix + "q")
        if isinstance(incoming, Tensor):
            self.q = torch.empty(incoming.shape, dtype=incoming.dtype)
        super()._load_from_state_dict(state_dict, prefix, *args)
