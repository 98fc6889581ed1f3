"""Typed prediction sets. Every set answers ``contains(y)`` and ``size()``.

:class:`Interval` (elementwise), :class:`ZeroOrInterval` (a zero-inflated target: the point 0 and a positive
interval), :class:`LabelSet` (boolean label mask) and :class:`Box` (simultaneous per-dimension bounds) implement
the same :class:`PredictionSet` protocol, so metrics and writers never branch on the set type.
Later types (ball/ellipsoid) follow the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["Box", "Interval", "LabelSet", "PredictionSet", "ZeroOrInterval"]


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


@dataclass(frozen=True)
class ZeroOrInterval:
    """Set of a zero-inflated target (band gaps): ``{0}`` where ``zero`` holds, and ``[lower, upper] ∩ (0, ∞)``.

    The point 0 and the positive values are separate outcomes (a metal, a gap), so a set may leave 0 out while
    its positive part starts at 0: ``(0, upper]`` says "not a metal, gap at most ``upper``". Where ``zero``
    holds, ``lower`` is 0 and the set is the closed ``[0, upper]``.

    Attributes
    ----------
    zero : torch.Tensor
        Bool, shape ``(n,)``: 0 is in the set.
    lower, upper : torch.Tensor
        Bounds of the positive part, shape ``(n,)``, ``0 <= lower <= upper``, in the target's unit.

    """

    zero: Tensor
    lower: Tensor
    upper: Tensor

    def __post_init__(self) -> None:
        """Validate the bounds (as :class:`Interval`), their sign and the mask."""
        Interval(self.lower, self.upper)
        if not isinstance(self.zero, Tensor) or self.zero.dtype != torch.bool or self.zero.shape != self.lower.shape:
            raise ValueError("zero must be a bool tensor of the bounds' shape")
        if (self.lower < 0).any() or (self.zero & (self.lower > 0)).any():
            raise ValueError("a zero-inflated set needs lower >= 0, and lower == 0 where it holds 0")

    @property
    def shape(self) -> torch.Size:
        """Shape of the bounds."""
        return self.lower.shape

    def contains(self, y: Tensor) -> Tensor:
        """``y == 0`` and ``zero``, or ``y > 0`` and ``lower <= y <= upper``; bool, the bounds' shape."""
        if y.shape != self.lower.shape:
            raise ValueError(f"y has shape {tuple(y.shape)}, the set has shape {tuple(self.lower.shape)}")
        return torch.where(y > 0, (self.lower <= y) & (y <= self.upper), self.zero & (y == 0))

    def size(self) -> Tensor:
        """Width ``upper - lower`` of the positive part (the point 0 adds none)."""
        return self.upper - self.lower


def check_labels(y: Tensor, shape: torch.Size, n_labels: int) -> None:
    """Raise ``ValueError`` unless ``y`` holds integer labels in ``[0, n_labels)`` with the given shape."""
    if not isinstance(y, Tensor) or y.shape != shape or y.is_floating_point() or y.dtype == torch.bool:
        got = f"{y.dtype} {tuple(y.shape)}" if isinstance(y, Tensor) else type(y).__name__
        raise ValueError(f"y must be integer labels of shape {tuple(shape)}, got {got}")
    if y.numel() and (y.min() < 0 or y.max() >= n_labels):
        raise ValueError(f"labels must be in [0, {n_labels}), got range [{y.min()}, {y.max()}]")


@dataclass(frozen=True)
class LabelSet:
    """Set of class labels per example, as a boolean mask.

    Attributes
    ----------
    mask : torch.Tensor
        Bool, shape ``(..., K)``; ``mask[..., c]`` is ``True`` when label ``c`` is in the set. A row may be
        empty (randomised APS can give empty sets) or full.

    """

    mask: Tensor

    def __post_init__(self) -> None:
        """Validate dtype and shape of the mask."""
        if not isinstance(self.mask, Tensor) or self.mask.dtype != torch.bool or self.mask.dim() == 0:
            raise ValueError("LabelSet mask must be a bool tensor of shape (..., K)")

    @property
    def shape(self) -> torch.Size:
        """Batch shape ``mask.shape[:-1]``."""
        return self.mask.shape[:-1]

    def contains(self, y: Tensor) -> Tensor:
        """``mask[..., y]``: whether the integer label ``y`` (shape ``mask.shape[:-1]``) is in its set."""
        check_labels(y, self.shape, self.mask.shape[-1])
        return self.mask.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)

    def size(self) -> Tensor:
        """Cardinality ``|C(x)|`` of each set, shape ``mask.shape[:-1]``, default float dtype."""
        return self.mask.sum(-1).to(torch.get_default_dtype())


@dataclass(frozen=True)
class Box:
    """Axis-aligned box ``∏_j [lower_j, upper_j]``: one set per example for a vector target.

    Attributes
    ----------
    lower, upper : torch.Tensor
        Bounds, identical shapes ``(..., d)``, in the target's unit; ``±inf`` for unbounded sides. Validated
        like :class:`Interval` (same shape, no NaN, ``lower <= upper``).

    """

    lower: Tensor
    upper: Tensor

    def __post_init__(self) -> None:
        """Validate the bounds (delegated to :class:`Interval`) and that there is a dimension axis."""
        Interval(self.lower, self.upper)
        if self.lower.dim() == 0:
            raise ValueError("Box bounds must have shape (..., d)")

    def contains(self, y: Tensor) -> Tensor:
        """Return ``all_j lower_j <= y_j <= upper_j`` (every component inside), shape ``(...)``."""
        return Interval(self.lower, self.upper).contains(y).all(-1)

    def size(self) -> Tensor:
        """Log-volume ``Σ_j log(upper_j - lower_j)``, shape ``(...)``.

        ``+inf`` if a side is unbounded, ``-inf`` if some width is zero (measure zero wins over unbounded).
        """
        width = self.upper - self.lower
        flat = (width == 0).any(-1)
        logvol = torch.where(width == 0, torch.ones_like(width), width).log().sum(-1)
        return torch.where(flat, torch.full_like(logvol, -math.inf), logvol)
