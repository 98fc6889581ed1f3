r"""Adaptive conformal inference, ACI (Gibbs & Candès 2021).

Reference: Gibbs & Candès, "Adaptive conformal inference under distribution shift", NeurIPS 2021.
``α_{t+1} = α_t + γ(α - err_t)`` (Eq. 2) and ``q_t = Q_{1-α_t}`` of a window of past scores. Prop. 4.1:
for every ``T`` and any sequence, ``|(1/T) Σ_t err_t - α| <= (max(α_1, 1-α_1) + γ) / (γ T)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .._checks import (
    check_calibrator_dict,
    check_scores,
    finite_real,
    float_list,
    is_int,
    positive_real,
    prepare_state_load,
)
from ..quantile import conformal_quantile
from ..split import CALIBRATORS
from .online import OnlineCalibrator, step_score, step_value

__all__ = ["ACI"]


class ACI(OnlineCalibrator):
    """Adaptive conformal inference (Gibbs & Candès 2021).

    ``q_t = Q_{1-α_t}(window)`` (:func:`~sciml.uq.quantile.conformal_quantile`), ``+inf`` (full set) when
    ``α_t <= 0`` and ``-inf`` (empty set) when ``α_t >= 1`` [Sec. 2]. Buffers: ``alpha_t`` (0-dim float64)
    and ``scores`` ``(n,)`` float64, the last ``window`` scores in arrival order.

    Parameters
    ----------
    score : str
        Name in :data:`sciml.uq.scores.SCORES` for :meth:`predict_set`.
    alpha : float
        Target miscoverage ``α`` in ``(0, 1)``; also ``α_1``.
    gamma : float
        Step size ``γ > 0``.
    window : int or None
        Keep only the last ``window`` scores (``None``: all).

    """

    method = "aci"

    def __init__(
        self, score: str = "absolute", alpha: float = 0.1, gamma: float = 0.005, window: int | None = None
    ) -> None:
        super().__init__(score, alpha)
        self.gamma = positive_real(gamma, "gamma")
        if window is not None and (not is_int(window) or window < 1):
            raise ValueError(f"'window' must be None or a positive integer, got {window!r}")
        self.window = None if window is None else int(window)
        self.register_buffer("alpha_t", torch.tensor(self.alpha, dtype=torch.float64))
        self.register_buffer("scores", torch.empty(0, dtype=torch.float64))

    def _keep(self, scores: Tensor) -> Tensor:
        return scores if self.window is None else scores[-self.window :]

    def fit(self, scores: Tensor) -> ACI:
        """Set the window from calibration scores ``(n,)``, finite, in arrival order; ``α_t`` is kept."""
        check_scores(scores)
        self.scores = self._keep(scores.detach().to(self.scores))
        return self

    def threshold(self) -> Tensor:
        """Return ``Q_{1-α_t}(scores)``; ``+inf`` if ``α_t <= 0`` or few scores; ``-inf`` if ``α_t >= 1``."""
        a = float(self.alpha_t)
        if 0 < a < 1:
            return conformal_quantile(self.scores, a)
        return torch.tensor(math.inf if a <= 0 else -math.inf, dtype=torch.float64, device=self.scores.device)

    def update(self, covered: bool | Tensor, score: float | Tensor | None = None) -> ACI:
        """Step: ``α_{t+1} = α_t + γ(α - err_t)``, ``err_t = 1 - covered``; append ``score`` if given.

        ``covered`` is ignored when ``α_t`` is outside ``(0, 1)``: the prescribed set is then the whole
        space (``err_t = 0``) or empty (``err_t = 1``), as in Gibbs & Candès (2021); Prop. 4.1 relies on it.
        """
        covered = step_value(covered, "covered")
        if covered not in (0.0, 1.0):
            raise ValueError(f"covered must be a bool or 0/1, got {covered}")
        a = float(self.alpha_t)
        err = 1.0 if a >= 1 else 0.0 if a <= 0 else float(not covered)
        self.alpha_t.add_(self.gamma * (self.alpha - err))
        if score is not None:
            s = torch.tensor([step_score(score)], dtype=self.scores.dtype)
            self.scores = self._keep(torch.cat([self.scores, s.to(self.scores.device)]))
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if prepare_state_load(self, state_dict, prefix, ("scores",), args[-1]):  # args[-1]: error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable configuration and state (``alpha_t`` and the score window)."""
        return {
            "method": self.method,
            "score": self.score_name,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "window": self.window,
            "alpha_t": float(self.alpha_t),
            "scores": [float(s) for s in self.scores.tolist()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ACI:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        keys = {"method", "score", "alpha", "gamma", "window", "alpha_t", "scores"}
        check_calibrator_dict(d, keys, cls.method)
        new = cls(score=d["score"], alpha=d["alpha"], gamma=d["gamma"], window=d["window"])
        new.alpha_t.fill_(finite_real(d["alpha_t"], "alpha_t"))
        scores = float_list(d["scores"], "scores")
        if new.window is not None and len(scores) > new.window:
            raise ValueError(f"'scores' holds {len(scores)} scores, more than window={new.window}")
        new.scores = torch.tensor(scores, dtype=torch.float64)
        return new


CALIBRATORS[ACI.method] = ACI
