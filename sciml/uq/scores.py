"""Nonconformity scores for regression. Larger score = worse fit.

Each score class has a ``name`` and two methods that are inverse to each other:
``score(pred, y, sigma)`` maps a labelled example to a scalar score, and ``interval(pred, q, sigma)`` returns
the set of ``y`` with ``score(pred, y, sigma) <= q``. Scores are registered by name in :data:`SCORES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from .sets import Interval

__all__ = ["SCORES", "AbsoluteResidual", "NormalizedResidual", "Score"]


def _as_threshold(q: Tensor | float, like: Tensor) -> Tensor:
    q = torch.as_tensor(q, dtype=like.dtype, device=like.device)
    if torch.isnan(q).any() or (q < 0).any():
        raise ValueError(f"threshold q must be >= 0 and not NaN, got {q}")
    return q


def _check_same_shape(pred: Tensor, y: Tensor) -> None:
    if pred.shape != y.shape:
        raise ValueError(f"pred and y must have the same shape, got {tuple(pred.shape)} and {tuple(y.shape)}")


class Score(ABC):
    """Base class of regression scores; subclasses set ``name`` and implement both methods."""

    name: ClassVar[str]

    @abstractmethod
    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """Score of each example, same shape as ``pred``."""

    @abstractmethod
    def interval(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Interval:
        """Return the set ``{y : score(pred, y, sigma) <= q}``."""


class AbsoluteResidual(Score):
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


class NormalizedResidual(Score):
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


SCORES: dict[str, type[Score]] = {cls.name: cls for cls in (AbsoluteResidual, NormalizedResidual)}
