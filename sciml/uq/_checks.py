"""Strict validation shared by the calibrators: constructor arguments, ``from_dict`` payloads and buffers.

One owner for these checks so that every calibrator fails the same way, with a ``ValueError`` naming the
offending field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "check_calibrator_dict",
    "check_scores",
    "finite_real",
    "float_list",
    "is_int",
    "positive_real",
    "prepare_state_load",
    "sort_scores",
]


def check_scores(scores: Tensor) -> None:
    """Raise ``ValueError`` unless ``scores`` is a non-empty, finite, 1-D float tensor of shape ``(n,)``."""
    if not isinstance(scores, Tensor) or scores.dim() != 1 or not scores.is_floating_point():
        raise ValueError("calibration scores must be a 1-D floating tensor of shape (n,)")
    if scores.numel() == 0:
        raise ValueError("calibration scores are empty; fit needs at least one score")
    if not torch.isfinite(scores).all():
        raise ValueError("calibration scores must be finite (no NaN or inf)")


def sort_scores(scores: Tensor) -> Tensor:
    """Ascending sort of 1-D ``scores`` (detached); numpy's vectorised sort on CPU (about 10x torch's there)."""
    scores = scores.detach()
    if scores.device.type == "cpu":
        return torch.from_numpy(np.sort(scores.numpy()))
    return torch.sort(scores).values


def finite_real(x: object, name: str) -> float:
    """Return ``x`` as a float; ``ValueError`` unless it is a finite real number (bools rejected)."""
    if isinstance(x, bool) or not isinstance(x, Real) or not math.isfinite(x):
        raise ValueError(f"{name!r} must be a finite real number, got {x!r}")
    return float(x)


def positive_real(x: object, name: str) -> float:
    """Return ``x`` as a float; ``ValueError`` unless it is finite and ``> 0``."""
    x = finite_real(x, name)
    if x <= 0:
        raise ValueError(f"{name!r} must be > 0, got {x!r}")
    return x


def float_list(raw: object, name: str) -> list[float]:
    """Return ``raw`` as a list of floats; ``ValueError`` unless it is a list/tuple of finite numbers."""
    if not isinstance(raw, list | tuple) or not all(
        isinstance(s, Real) and not isinstance(s, bool) for s in raw
    ):
        raise ValueError(f"{name!r} must be a list of numbers")
    if not all(math.isfinite(s) for s in raw):
        raise ValueError(f"{name!r} must be finite (no NaN or inf)")
    return [float(s) for s in raw]


def check_calibrator_dict(d: object, keys: set[str], method: str) -> Mapping[str, Any]:
    """Check that ``d`` is a mapping with exactly ``keys`` and ``d["method"] == method``; return it."""
    if not isinstance(d, Mapping):
        raise ValueError(f"calibrator dict must be a mapping, got {type(d).__name__}")
    if set(d) != keys:
        raise ValueError(
            f"{method} calibrator dict needs exactly the keys {sorted(keys)}; "
            f"missing {sorted(keys - set(d))}, unexpected {sorted(set(d) - keys, key=str)}"
        )
    if d["method"] != method:
        raise ValueError(f"method must be {method!r}, got {d['method']!r}")
    return d


def is_int(x: object) -> bool:
    """Return ``True`` for Python/numpy integers, ``False`` for bools and everything else."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def prepare_state_load(
    module: nn.Module,
    state_dict: Mapping[str, Any],
    prefix: str,
    names: tuple[str, ...],
    error_msgs: list[str],
    checked: str = "scores",
) -> bool:
    """Check an incoming score buffer ``checked`` (1-D, finite), then resize the buffers ``names`` to match.

    Called first in ``_load_from_state_dict`` of calibrators whose state size depends on the data (number of
    scores, of groups), so that the default strict copy succeeds. Returns ``False`` after appending to
    ``error_msgs`` if the scores are invalid. Missing entries are left to the default loader to report.
    """
    scores = state_dict.get(prefix + checked)
    if isinstance(scores, Tensor) and (scores.dim() != 1 or not torch.isfinite(scores).all()):
        error_msgs.append(f"{prefix}{checked} must be a 1-D tensor of finite scores")
        return False
    resize_buffers(module, state_dict, prefix, names)
    return True


def resize_buffers(module: nn.Module, state_dict: Mapping[str, Any], prefix: str, names: tuple[str, ...]) -> None:
    """Give the buffers ``names`` of ``module`` the shape and dtype of the incoming entries (same device).

    Calibrator state grows with the data (scores, memberships), so the default strict copy of
    ``_load_from_state_dict`` needs buffers of the incoming shape first. Missing entries are left alone.
    """
    for name in names:
        incoming = state_dict.get(prefix + name)
        if isinstance(incoming, Tensor):
            device = getattr(module, name).device
            setattr(module, name, torch.empty(incoming.shape, dtype=incoming.dtype, device=device))
