r"""The one finite-sample conformal quantile used by every calibrator in :mod:`sciml.uq`, and its two relatives.

For ``n`` exchangeable calibration scores and miscoverage ``alpha`` the split-conformal threshold is

.. math::

    \hat q = Q_{1-\alpha}(S \cup \{\infty\}) = s_{(k)}, \qquad k = \lceil (n+1)(1-\alpha) \rceil,

the ``k``-th smallest score, and ``+inf`` when ``k > n`` (too few scores: the set must be the whole space,
never an under-covering finite set). See ``docs/calibration.md``. Its dual, the conformal p-value
``(1 + #{i : s_i >= s})/(n + 1)`` (:func:`conformal_pvalues`), and the quantile of weighted scores
(:func:`weighted_quantile`, weighted conformal under shift) live here too.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Integral, Real

import torch
from torch import Tensor

__all__ = ["check_alpha", "conformal_pvalues", "conformal_quantile", "conformal_rank", "weighted_quantile"]


def check_alpha(alpha: float) -> float:
    """Validate a miscoverage level and return it as a ``float``.

    Parameters
    ----------
    alpha : float
        Target miscoverage, strictly between 0 and 1.

    Returns
    -------
    float
        ``alpha`` as a Python float.

    Raises
    ------
    ValueError
        If ``alpha`` is not a real number (bools are rejected) or not in the open interval ``(0, 1)``.

    """
    if isinstance(alpha, bool) or not isinstance(alpha, Real):
        raise ValueError(f"alpha must be a real number in (0, 1), got {alpha!r}")
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:  # also rejects NaN
        raise ValueError(f"alpha must be in the open interval (0, 1), got {alpha!r}")
    return alpha


def conformal_rank(n: int, alpha: float) -> int:
    """Rank ``k = ceil((n + 1)(1 - alpha))`` of the conformal quantile among ``n`` scores.

    The product is evaluated in exact rational arithmetic on the shortest decimal form of ``alpha``
    (``repr``), so ``n=9, alpha=0.1`` gives exactly 9 and ``n=9, alpha=0.7`` exactly 3, although
    ``10 * (1 - 0.7)`` is ``3.0000000000000004`` in floating point.

    Parameters
    ----------
    n : int
        Number of calibration scores, ``n >= 0``.
    alpha : float
        Target miscoverage in ``(0, 1)``.

    Returns
    -------
    int
        The rank ``k`` (1-based). ``k > n`` means the threshold is ``+inf``.

    Raises
    ------
    ValueError
        If ``n`` is not a non-negative integer or ``alpha`` is not in ``(0, 1)``.

    """
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    alpha = check_alpha(alpha)
    return math.ceil((int(n) + 1) * (1 - Fraction(repr(alpha))))


def conformal_quantile(scores: Tensor, alpha: float) -> Tensor:
    """Finite-sample conformal quantile ``Q_{1-alpha}(S ∪ {+inf})`` along the last dimension.

    Parameters
    ----------
    scores : torch.Tensor
        Calibration scores, shape ``(..., n)``, floating dtype. ``+inf`` scores are allowed; NaN is not.
        A 1-D input gives a 0-dim result; leading dimensions are independent calibration sets.
    alpha : float
        Target miscoverage in ``(0, 1)``.

    Returns
    -------
    torch.Tensor
        Shape ``(...)`` (0-dim for 1-D ``scores``), same dtype and device as ``scores``: the ``k``-th
        smallest score with ``k = ceil((n+1)(1-alpha))``, or ``+inf`` when ``k > n``.

    Raises
    ------
    ValueError
        If ``scores`` is 0-dim, not floating point, contains NaN, or ``alpha`` is invalid.

    """
    if not isinstance(scores, Tensor):
        raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension, shape (..., n)")
    if not scores.is_floating_point():
        raise ValueError(f"scores must have a floating dtype, got {scores.dtype}")
    if torch.isnan(scores).any():
        raise ValueError("scores contain NaN; a NaN score cannot be ranked")
    n = scores.shape[-1]
    k = conformal_rank(n, alpha)
    if k > n:
        return torch.full(scores.shape[:-1], math.inf, dtype=scores.dtype, device=scores.device)
    return torch.kthvalue(scores, k, dim=-1).values  # O(n) selection, same value as sorting


def conformal_pvalues(cal_sorted: Tensor, scores: Tensor) -> Tensor:
    """``(1 + #{i : s_i >= s})/(n + 1)`` for each entry of ``scores`` against sorted calibration scores ``(n,)``."""
    n = cal_sorted.numel()
    below = torch.searchsorted(cal_sorted, scores.contiguous(), right=False)  # #{s_i < s}
    return (1 + n - below).to(scores.dtype) / (n + 1)


def weighted_quantile(values: Tensor, weights: Tensor, levels: Tensor) -> Tensor:
    """Smallest ``v`` with ``Σ_{v_i <= v} w_i >= p`` for each level ``p`` (weights sum to 1); shape of ``levels``."""
    order = torch.argsort(values)
    v, cum = values[order], weights[order].cumsum(0)
    idx = torch.searchsorted(cum, levels.clamp(0, 1) - 1e-12).clamp_max(v.numel() - 1)
    return v[idx]
