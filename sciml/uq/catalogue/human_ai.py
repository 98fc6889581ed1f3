r"""Human–AI collaborative prediction sets with two thresholds (offline and online).

Reference: human–AI collaborative conformal sets (ICML 2026). Given a
human label set ``H(x)`` (a mask, shape ``(..., K)``) and model scores ``s(x, y)`` for every label, the set is

.. math::  C(x) = \{y \in H(x) : s(x, y) \le b\} \cup \{y \notin H(x) : s(x, y) \le a\}.

**Offline** (:class:`HumanAIConformal`): ``b = Q_{1-ε}`` of the calibration scores with ``Y ∈ H`` and
``a = Q_{1-δ}`` of those with ``Y ∉ H`` (finite-sample quantile, :func:`~sciml.uq.quantile.conformal_quantile`).
For exchangeable data, conditioning on the event ``Y ∈ H`` keeps the scores exchangeable, so

.. math::  P(Y \in C \mid Y \in H) \ge 1 - ε, \qquad P(Y \in C \mid Y \notin H) \ge 1 - δ,

with mean ``k_g/(n_g+1)``, ``k_g = ⌈(n_g+1)(1-q_g)⌉`` in each group: Mondrian conformal with the group
``1[Y ∈ H]``, which is observed once the label is. ``δ`` large (e.g. 0.7) lets the model add few labels
outside the human set; ``ε`` small keeps almost all correct human labels.

**Online** (:class:`OnlineHumanAI`): only the revealed group's threshold moves,
``θ_g ← θ_g + η(1[Y ∉ C] - q_g)`` with ``q_in = ε``, ``q_out = δ``. Each group's threshold is a quantile
tracker on its own subsequence, so with scores in ``[0, B]`` and ``θ_g`` started in ``[0, B]``,
``|mean_{t ∈ g} 1[Y_t ∉ C_t] - q_g| <= (B + η)/(η T_g)`` for every ``T_g`` steps of group ``g``
(:func:`human_ai_bound`), for any sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_calibrator_dict, check_scores, finite_real, float_list, positive_real, resize_buffers
from ..quantile import check_alpha, conformal_quantile
from ..sets import LabelSet
from ..split import CALIBRATORS
from .online import step_score

__all__ = ["HumanAIConformal", "OnlineHumanAI", "collaborative_set", "human_ai_bound"]


def human_ai_bound(t_g: int, lr: float, b: float) -> float:
    """Long-run bound ``(B + η)/(η T_g)`` on ``|miscoverage_g - q_g|`` after ``T_g >= 1`` steps in group ``g``."""
    return (b + lr) / (lr * t_g)


def collaborative_set(all_scores: Tensor, human: Tensor, b: Tensor | float, a: Tensor | float) -> LabelSet:
    """``{y ∈ H : s <= b} ∪ {y ∉ H : s <= a}``.

    Parameters
    ----------
    all_scores : torch.Tensor
        Scores of every label, shape ``(..., K)`` (e.g. ``LAC().all_scores(probs)``).
    human : torch.Tensor
        Bool mask of the human set ``H(x)``, shape ``(..., K)``.
    b, a : torch.Tensor or float
        Thresholds inside and outside ``H``; 0-dim or broadcastable to ``(...)``.

    """
    if not isinstance(human, Tensor) or human.dtype != torch.bool or human.shape != all_scores.shape:
        raise ValueError(f"human set must be a bool mask of shape {tuple(all_scores.shape)} like the scores")
    b, a = (torch.as_tensor(v, dtype=all_scores.dtype, device=all_scores.device) for v in (b, a))
    if torch.isnan(b).any() or torch.isnan(a).any():
        raise ValueError("thresholds a and b must not be NaN")
    return LabelSet(torch.where(human, all_scores <= b.unsqueeze(-1), all_scores <= a.unsqueeze(-1)))


def _check_in_human(in_human: Tensor, n: int) -> Tensor:
    if not isinstance(in_human, Tensor) or in_human.dtype != torch.bool or in_human.shape != (n,):
        raise ValueError(f"in_human must be a bool tensor of shape ({n},): whether each label is in H(x)")
    return in_human


class HumanAIConformal(nn.Module):
    """Offline two-threshold human–AI sets; buffers ``scores_in`` / ``scores_out`` (sorted, ``(n_in,)``/``(n_out,)``).

    Parameters
    ----------
    eps : float
        Target miscoverage for labels inside the human set, in ``(0, 1)``.
    delta : float
        Target miscoverage for labels outside the human set, in ``(0, 1)``.

    """

    method = "human_ai"

    def __init__(self, eps: float = 0.05, delta: float = 0.7) -> None:
        super().__init__()
        self.eps, self.delta = check_alpha(eps), check_alpha(delta)
        self.register_buffer("scores_in", torch.empty(0))
        self.register_buffer("scores_out", torch.empty(0))

    def fit(self, scores: Tensor, in_human: Tensor) -> HumanAIConformal:
        """Store true-label calibration ``scores`` ``(n,)`` split by ``in_human`` ``(n,)`` bool (``Y ∈ H``)."""
        check_scores(scores)
        in_human = _check_in_human(in_human, scores.numel()).to(scores.device)
        self.scores_in = scores[in_human].detach().sort().values
        self.scores_out = scores[~in_human].detach().sort().values
        return self

    def thresholds(self) -> tuple[Tensor, Tensor]:
        """``(b, a)``: ``Q_{1-ε}`` of the in-``H`` scores and ``Q_{1-δ}`` of the out-of-``H`` scores (0-dim)."""
        if self.scores_in.numel() + self.scores_out.numel() == 0:
            raise RuntimeError("HumanAIConformal is not fitted; call fit(scores, in_human) first")
        # an empty group carries no calibration information: its threshold is +inf (n = 0 < k)
        return conformal_quantile(self.scores_in, self.eps), conformal_quantile(self.scores_out, self.delta)

    def predict_set(self, all_scores: Tensor, human: Tensor) -> LabelSet:
        """Collaborative set for label scores ``(..., K)`` and human mask ``(..., K)``."""
        b, a = self.thresholds()
        return collaborative_set(all_scores, human, b, a)

    def forward(self, all_scores: Tensor, human: Tensor) -> LabelSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(all_scores, human)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        resize_buffers(self, state_dict, prefix, ("scores_in", "scores_out"))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "eps", "delta", "scores_in", "scores_out"}``."""
        self.thresholds()
        return {"method": self.method, "eps": self.eps, "delta": self.delta,
                "scores_in": [float(s) for s in self.scores_in.tolist()],
                "scores_out": [float(s) for s in self.scores_out.tolist()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HumanAIConformal:
        """Rebuild from :meth:`to_dict` output (float64); ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "eps", "delta", "scores_in", "scores_out"}, cls.method)
        s_in, s_out = (float_list(d[k], k) for k in ("scores_in", "scores_out"))
        if not s_in and not s_out:
            raise ValueError("'scores_in' and 'scores_out' are both empty")
        scores = torch.tensor(s_in + s_out, dtype=torch.float64)
        mask = torch.arange(len(s_in) + len(s_out)) < len(s_in)
        return cls(d["eps"], d["delta"]).fit(scores, mask)


class OnlineHumanAI(nn.Module):
    """Online two-threshold human–AI sets: ``θ_g ← θ_g + η(1[Y ∉ C] - q_g)`` for the revealed group only.

    Buffer ``theta`` ``(2,)`` float64 = ``(b, a)`` (inside, outside ``H``). Parameters ``eps``, ``delta``
    as in :class:`HumanAIConformal`; ``lr`` the step ``η > 0`` in score units; ``b0``, ``a0`` the start.
    """

    method = "online_human_ai"

    def __init__(self, eps: float = 0.05, delta: float = 0.7, lr: float = 0.05, b0: float = 0.5,
                 a0: float = 0.5) -> None:
        super().__init__()
        self.eps, self.delta = check_alpha(eps), check_alpha(delta)
        self.lr = positive_real(lr, "lr")
        start = [finite_real(b0, "b0"), finite_real(a0, "a0")]
        self.register_buffer("theta", torch.tensor(start, dtype=torch.float64))

    def predict_set(self, all_scores: Tensor, human: Tensor) -> LabelSet:
        """Collaborative set with the current ``(b_t, a_t)``, for scores and mask of shape ``(..., K)``."""
        return collaborative_set(all_scores, human, self.theta[0], self.theta[1])

    def forward(self, all_scores: Tensor, human: Tensor) -> LabelSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(all_scores, human)

    def update(self, score: float | Tensor, in_human: bool) -> OnlineHumanAI:
        """Reveal the true label's score and whether it is in ``H``; step that group's threshold."""
        g = 0 if bool(in_human) else 1
        miss = float(step_score(score) > float(self.theta[g]))
        self.theta[g] += self.lr * (miss - (self.eps, self.delta)[g])
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable configuration and state."""
        return {"method": self.method, "eps": self.eps, "delta": self.delta, "lr": self.lr,
                "theta": [float(t) for t in self.theta.tolist()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OnlineHumanAI:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "eps", "delta", "lr", "theta"}, cls.method)
        theta = float_list(d["theta"], "theta")
        if len(theta) != 2:
            raise ValueError(f"'theta' must hold two thresholds (b, a), got {len(theta)}")
        return cls(d["eps"], d["delta"], d["lr"], *theta)


CALIBRATORS[HumanAIConformal.method] = HumanAIConformal
CALIBRATORS[OnlineHumanAI.method] = OnlineHumanAI
