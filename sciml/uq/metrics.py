"""Evaluation metrics for prediction sets: coverage, width and the interval (Winkler) score."""

from __future__ import annotations

import torch
from torch import Tensor

from .quantile import check_alpha
from .sets import Interval, PredictionSet

__all__ = ["coverage", "mean_width", "winkler_score"]


def _float_dtype(y: Tensor) -> torch.dtype:
    return y.dtype if y.is_floating_point() else torch.get_default_dtype()


def coverage(pset: PredictionSet, y: Tensor) -> Tensor:
    """Empirical coverage ``(1/m) Σ_i 1[y_i ∈ C(x_i)]``.

    Parameters
    ----------
    pset : PredictionSet
        Any set with ``contains``; for an :class:`Interval` of shape ``(m,)`` or ``(m, d)`` every entry
        counts once.
    y : torch.Tensor
        Targets, the shape the set expects.

    Returns
    -------
    torch.Tensor
        0-dim float tensor in ``[0, 1]``.

    """
    hit = pset.contains(y)
    if hit.numel() == 0:
        raise ValueError("coverage of an empty set of targets is undefined")
    return hit.to(_float_dtype(y)).mean()


def mean_width(interval: PredictionSet) -> Tensor:
    """Mean set size ``(1/m) Σ_i |C(x_i)|``; for an interval the mean width ``upper - lower``.

    Returns ``+inf`` if any set is unbounded.
    """
    size = interval.size()
    if size.numel() == 0:
        raise ValueError("mean width of an empty set is undefined")
    return size.mean()


def winkler_score(interval: Interval, y: Tensor, alpha: float) -> Tensor:
    r"""Mean interval (Winkler) score; lower is better.

    .. math::

        W_i = (u_i - l_i) + \frac{2}{\alpha}(l_i - y_i)\,1[y_i < l_i]
              + \frac{2}{\alpha}(y_i - u_i)\,1[y_i > u_i]

    Parameters
    ----------
    interval : Interval
        Bounds ``l, u``, shape ``(m,)`` or ``(m, d)``.
    y : torch.Tensor
        Targets, same shape.
    alpha : float
        Miscoverage level the interval was built for, in ``(0, 1)``.

    Returns
    -------
    torch.Tensor
        0-dim tensor, ``mean_i W_i`` (``+inf`` if any interval is unbounded).

    """
    alpha = check_alpha(alpha)
    if y.shape != interval.lower.shape:
        raise ValueError(f"y has shape {tuple(y.shape)}, interval has shape {tuple(interval.lower.shape)}")
    if y.numel() == 0:
        raise ValueError("Winkler score of an empty set of targets is undefined")
    below = (interval.lower - y).clamp_min(0)  # (l - y) 1[y < l]
    above = (y - interval.upper).clamp_min(0)  # (y - u) 1[y > u]
    return (interval.size() + (2.0 / alpha) * (below + above)).mean()
