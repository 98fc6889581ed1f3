"""Typed results passed across module boundaries (models → calibrators → writers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Prediction:
    """A model prediction with an optional prediction set.

    Attributes
    ----------
    mean : torch.Tensor
        Point prediction, shape ``(n,)`` or ``(n, d)``, in the target's unit.
    lower, upper : torch.Tensor or None
        Bounds of the conformal interval, same shape as ``mean`` (``±inf`` when the calibration set is too
        small for the requested ``alpha``).
    alpha : float or None
        Miscoverage level of the interval (the interval covers with probability ``≥ 1 - alpha``).
    sigma : torch.Tensor or None
        Per-sample scale used by a normalised score, same shape as ``mean``.
    meta : dict
        Free-form extra information (units, target name, ...).

    """

    mean: torch.Tensor
    lower: torch.Tensor | None = None
    upper: torch.Tensor | None = None
    alpha: float | None = None
    sigma: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)
