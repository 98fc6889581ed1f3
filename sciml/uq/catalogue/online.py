r"""Online conformal calibration for streams: the label is revealed after each prediction, then ``update``.

:class:`OnlineCalibrator` is the template (``threshold`` / ``predict_set`` / ``update``); ACI lives in
:mod:`sciml.uq.catalogue.aci`. :class:`QuantileTracker` is online gradient descent on the pinball loss of the
threshold, the P part of conformal PID control (Angelopoulos, Candès, Tibshirani 2023, Eq. 1):
``q_{t+1} = q_t + η(err_t - α)``, ``err_t = 1[s_t > q_t]``. For scores in ``[0, B]`` and ``q_1 ∈ [0, B]``,
``|(1/T) Σ_t err_t - α| <= (B + η) / (η T)`` for every ``T``.

State lives in buffers (``state_dict``) and in ``to_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_calibrator_dict, finite_real, positive_real
from ..quantile import check_alpha
from ..scores import get_score
from ..sets import PredictionSet
from ..split import CALIBRATORS

__all__ = ["OnlineCalibrator", "QuantileTracker", "step_score", "step_value"]


def step_value(x: object, name: str) -> float:
    """Return one number from a bool, a real or a one-element tensor; ``ValueError`` otherwise or if NaN."""
    if isinstance(x, Tensor) and x.numel() == 1:
        x = x.item()
    if not isinstance(x, Real) or math.isnan(x):
        raise ValueError(f"{name} must be a single number or bool (one time step), got {x!r}")
    return float(x)


def step_score(x: object) -> float:
    """Return one finite score (a Python number or a one-element tensor); ``ValueError`` otherwise."""
    if isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype == torch.bool):
        raise ValueError(f"score must be a number, not a bool, got {x!r}")
    return finite_real(step_value(x, "score"), "score")


class OnlineCalibrator(nn.Module):
    """Template: subclasses implement :meth:`threshold` and ``update``; sets come from the named score."""

    method: str

    def __init__(self, score: str, alpha: float) -> None:
        super().__init__()
        self.score_fn = get_score(score)
        self.score_name = score
        self.alpha = check_alpha(alpha)

    def threshold(self) -> Tensor:
        """Return the current threshold ``q_t`` (0-dim float64); may be ``±inf`` or negative."""
        raise NotImplementedError

    def predict_set(self, pred: Tensor, sigma: Tensor | None = None) -> PredictionSet:
        """Set ``{y : s(pred, y, sigma) <= q_t}`` for the current step.

        Non-negative scores (absolute, normalised): ``q_t < 0`` means the empty set; an ``Interval`` cannot
        be empty, so ``q_t`` is clamped to 0 (the degenerate interval ``[ŷ, ŷ]``). Signed scores
        (``score_fn.signed``, e.g. CQR, negative inside the band) get ``q_t`` unclamped: ``q_t < 0`` shrinks
        the band ``[q̂_lo - q_t, q̂_hi + q_t]``. ``update`` counts every step by the unclamped rule, so the
        long-run bounds hold.
        """
        q = self.threshold()
        return self.score_fn.predict_set(pred, q if self.score_fn.signed else q.clamp_min(0), sigma)

    def forward(self, pred: Tensor, sigma: Tensor | None = None) -> PredictionSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(pred, sigma)


class QuantileTracker(OnlineCalibrator):
    """Online quantile tracking, ``q_{t+1} = q_t + η(1[s_t > q_t] - α)`` (Angelopoulos et al. 2023, Eq. 1).

    Buffer: ``q`` (0-dim float64). Parameters: ``score`` and ``alpha`` as in :class:`~sciml.uq.catalogue.aci.ACI`,
    ``lr`` the step ``η > 0``, ``q0`` the initial threshold ``q_1`` (choose it in ``[0, B]`` for the bound).
    """

    method = "quantile_tracker"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, lr: float = 0.1, q0: float = 0.0) -> None:
        super().__init__(score, alpha)
        self.lr = positive_real(lr, "lr")
        self.register_buffer("q", torch.tensor(finite_real(q0, "q0"), dtype=torch.float64))

    def threshold(self) -> Tensor:
        """Return the current threshold ``q_t`` (0-dim float64, a copy)."""
        return self.q.clone()

    def update(self, score: float | Tensor) -> QuantileTracker:
        """Step with revealed score ``s_t``: ``err_t = 1[s_t > q_t]``, ``q_{t+1} = q_t + η(err_t - α)``."""
        err = float(step_score(score) > float(self.q))
        self.q.add_(self.lr * (err - self.alpha))
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "score", "alpha", "lr", "q"}``."""
        return {
            "method": self.method,
            "score": self.score_name,
            "alpha": self.alpha,
            "lr": self.lr,
            "q": float(self.q),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> QuantileTracker:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "score", "alpha", "lr", "q"}, cls.method)
        return cls(score=d["score"], alpha=d["alpha"], lr=d["lr"], q0=d["q"])


CALIBRATORS[QuantileTracker.method] = QuantileTracker
