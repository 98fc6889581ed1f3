"""Typed results passed across module boundaries (models → calibrators → writers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Prediction:
    """A model's point prediction, with what a calibrator needs to turn it into a prediction set.

    The set itself is the calibrator's output (``calibrator.predict_set(pred.mean, pred.sigma)``, a typed
    :class:`sciml.uq.PredictionSet`), so a ``Prediction`` carries no bounds that could disagree with it.

    Attributes
    ----------
    mean : torch.Tensor
        Point prediction, shape ``(n,)`` or ``(n, d)``, in the target's unit.
    sigma : torch.Tensor or None
        Per-sample scale used by a normalised score, same shape as ``mean``.
    meta : dict
        Free-form extra information (units, target name, ...).

    """

    mean: torch.Tensor
    sigma: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)
