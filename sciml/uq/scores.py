"""Nonconformity score base classes and the regression scores. Larger score = worse fit.

Every score has a ``name``, ``score(pred, y, sigma)`` mapping a labelled example to a scalar, and its inverse
``predict_set(pred, q, sigma)``, the typed set ``{y : score(pred, y, sigma) <= q}``. Regression scores
(:class:`IntervalScore`) return an :class:`~sciml.uq.sets.Interval` via ``interval``; classification scores
live in :mod:`sciml.uq.catalogue.classification`. Scores that calibrators look up by name are in :data:`SCORES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from .sets import Interval, PredictionSet

__all__ = ["CQR", "SCORES", "AbsoluteResidual", "IntervalScore", "NormalizedResidual", "Score", "get_score"]


def _as_threshold(q: Tensor | float, like: Tensor) -> Tensor:
    q = torch.as_tensor(q, dtype=like.dtype, device=like.device)
    if torch.isnan(q).any() or (q < 0).any():
        raise ValueError(f"threshold q must be >= 0 and not NaN, got {q}")
    return q


def _check_same_shape(pred: Tensor, y: Tensor) -> None:
    if pred.shape != y.shape:
        raise ValueError(f"pred and y must have the same shape, got {tuple(pred.shape)} and {tuple(y.shape)}")


class Score(ABC):
    """Base class of all nonconformity scores; subclasses set ``name`` and implement both methods."""

    name: ClassVar[str]
    #: ``True`` for scores that may be negative (CQR): their thresholds must never be clamped at 0.
    signed: ClassVar[bool] = False

    @abstractmethod
    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """Score of each example (larger = worse fit)."""

    @abstractmethod
    def predict_set(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> PredictionSet:
        """Return the set ``{y : score(pred, y, sigma) <= q}``; ``q`` is 0-dim or one value per example."""


class IntervalScore(Score):
    """Regression score whose sets are intervals; subclasses implement ``score`` and ``interval``."""

    @abstractmethod
    def interval(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """Return the set ``{y : score(pred, y, sigma) <= q}``."""

    def predict_set(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """Return :meth:`interval` (the set is an interval)."""
        return self.interval(pred, q, sigma)


class AbsoluteResidual(IntervalScore):
    """Absolute residual ``s = |y - ŷ|``; interval ``[ŷ - q, ŷ + q]``.

    ``sigma`` is unused; it is accepted so that all scores share one signature.
    """

    name: ClassVar[str] = "absolute"

    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """``|y - pred|``, shape of ``pred`` (``(n,)`` or ``(n, d)``)."""
        _check_same_shape(pred, y)
        return (y - pred).abs()

    def interval(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """``Interval(pred - q, pred + q)``; ``q = inf`` gives ``(-inf, inf)``."""
        q = _as_threshold(q, pred)
        return Interval(pred - q, pred + q)


class NormalizedResidual(IntervalScore):
    """Normalised residual ``s = |y - ŷ| / σ(x)``; interval ``[ŷ - qσ, ŷ + qσ]``.

    ``sigma`` (same shape as ``pred``, from a variance head or an ensemble) is required, finite and > 0.
    """

    name: ClassVar[str] = "normalized"

    @staticmethod
    def _check_sigma(sigma: Tensor | None, pred: Tensor) -> Tensor:
        if sigma is None:
            raise ValueError("the 'normalized' score needs sigma (same shape as pred), got None")
        if sigma.shape != pred.shape:
            raise ValueError(f"sigma has shape {tuple(sigma.shape)}, pred has shape {tuple(pred.shape)}")
        if not (torch.isfinite(sigma) & (sigma > 0)).all():
            raise ValueError("sigma must be finite and > 0 everywhere")
        return sigma

    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """``|y - pred| / sigma``, shape of ``pred``."""
        _check_same_shape(pred, y)
        sigma = self._check_sigma(sigma, pred)
        return (y - pred).abs() / sigma

    def interval(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """``Interval(pred - q * sigma, pred + q * sigma)``."""
        sigma = self._check_sigma(sigma, pred)
        half = _as_threshold(q, pred) * sigma
        return Interval(pred - half, pred + half)


class CQR(IntervalScore):
    r"""Conformalised quantile regression score (Romano, Patterson, Candès 2019, Eqs. 6-7).

    ``pred`` has shape ``(..., 2)``: the lower and upper quantile predictions ``q̂_lo(x), q̂_hi(x)``. The
    score ``s = max(q̂_lo - y, y - q̂_hi)`` (Eq. 6) is negative inside the band, so ``q`` may be negative; the
    set is ``[q̂_lo - q, q̂_hi + q]`` (Eq. 7). Where that set is empty (``q < (q̂_lo - q̂_hi)/2``, e.g. crossed
    quantiles or ``q = -inf``) the :class:`Interval` cannot be empty and collapses to the midpoint
    ``(q̂_lo + q̂_hi)/2``, a superset of the empty set. ``sigma`` is unused.
    """

    name: ClassVar[str] = "cqr"
    signed: ClassVar[bool] = True

    @staticmethod
    def _bounds(pred: Tensor) -> tuple[Tensor, Tensor]:
        if pred.dim() == 0 or pred.shape[-1] != 2:
            raise ValueError(f"CQR pred must have shape (..., 2) = (lower, upper), got {tuple(pred.shape)}")
        return pred[..., 0], pred[..., 1]

    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """``max(lo - y, y - hi)``, shape ``pred.shape[:-1]``."""
        lo, hi = self._bounds(pred)
        _check_same_shape(lo, y)
        return torch.maximum(lo - y, y - hi)

    def interval(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """``Interval(lo - q, hi + q)``; ``q`` may be negative or ``±inf``, not NaN."""
        lo, hi = self._bounds(pred)
        q = torch.as_tensor(q, dtype=pred.dtype, device=pred.device)
        if torch.isnan(q).any():
            raise ValueError("threshold q must not be NaN")
        lower, upper = lo - q, hi + q
        empty, mid = lower > upper, (lo + hi) / 2
        return Interval(torch.where(empty, mid, lower), torch.where(empty, mid, upper))


# Stateless interval scores, instantiated by name. CQR scores are signed (negative inside the band), so its
# thresholds may be negative. Stateful vector scores are in sciml.uq.vector.VECTOR_SCORES, classification
# scores in sciml.uq.catalogue.classification.CLASSIFICATION_SCORES.
SCORES: dict[str, type[Score]] = {cls.name: cls for cls in (AbsoluteResidual, NormalizedResidual, CQR)}


def get_score(name: str) -> Score:
    """Instantiate the score registered in :data:`SCORES` under ``name``; ``ValueError`` if unknown."""
    if not isinstance(name, str) or name not in SCORES:
        raise ValueError(f"unknown score {name!r}; known scores: {sorted(SCORES)}")
    return SCORES[name]()
