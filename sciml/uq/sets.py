"""Typed prediction sets. Every set answers ``contains(y)`` and ``size()``.

Later set types (label mask, box, ball/ellipsoid) implement the same :class:`PredictionSet` protocol so that
metrics and writers never branch on the set type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["Interval", "PredictionSet"]


@runtime_checkable
class PredictionSet(Protocol):
    """Protocol shared by all prediction sets in :mod:`sciml.uq`."""

    def contains(self, y: Tensor) -> Tensor:
        """Return a bool tensor, ``True`` where the set contains ``y``."""
        ...

    def size(self) -> Tensor:
        """Return the size of each set (width, label count, volume, ...); ``inf`` if unbounded."""
        ...


@dataclass(frozen=True)
class Interval:
    """Closed elementwise interval ``[lower, upper]``.

    Attributes
    ----------
    lower, upper : torch.Tensor
        Bounds, identical shapes ``(n,)`` or ``(n, d)``, in the target's unit. ``-inf`` / ``+inf`` mark
        unbounded sides (e.g. a calibration set too small for the requested ``alpha``).

    Raises
    ------
    ValueError
        If the shapes differ, a bound is NaN, or ``lower > upper`` somewhere.

    """

    lower: Tensor
    upper: Tensor

    def __post_init__(self) -> None:
        """Validate shapes and ordering of the bounds."""
        if self.lower.shape != self.upper.shape:
            raise ValueError(
                f"lower and upper must have the same shape, got {tuple(self.lower.shape)} "
                f"and {tuple(self.upper.shape)}"
            )
        if torch.isnan(self.lower).any() or torch.isnan(self.upper).any():
            raise ValueError("interval bounds contain NaN")
        if (self.lower > self.upper).any():
            raise ValueError("interval has lower > upper for some entries")

    @property
    def shape(self) -> torch.Size:
        """Shape of the bounds."""
        return self.lower.shape

    def contains(self, y: Tensor) -> Tensor:
        """Elementwise membership ``lower <= y <= upper``.

        Parameters
        ----------
        y : torch.Tensor
            Targets, same shape as the bounds.

        Returns
        -------
        torch.Tensor
            Bool tensor, same shape as the bounds.

        """
        if y.shape != self.lower.shape:
            raise ValueError(f"y has shape {tuple(y.shape)}, interval has shape {tuple(self.lower.shape)}")
        return (self.lower <= y) & (y <= self.upper)

    def size(self) -> Tensor:
        """Width ``upper - lower`` elementwise; ``+inf`` where a side is unbounded."""
        return self.upper - self.lower
