"""Evaluation metrics for prediction sets: coverage, size and the interval (Winkler) score.

Coverage comes marginal, per group (worst group), and for online methods long-run and rolling. Every metric
accepts any :class:`~sciml.uq.sets.PredictionSet` unless stated.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .quantile import check_alpha, conformal_rank
from .sets import Interval, PredictionSet

__all__ = [
    "bounded_width",
    "coverage",
    "coverage_miss_probability",
    "group_coverage",
    "long_run_coverage",
    "mean_width",
    "rolling_coverage",
    "set_size",
    "winkler_score",
    "worst_group_coverage",
]


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


def set_size(pset: PredictionSet) -> Tensor:
    """Mean set size ``(1/m) Σ_i |C(x_i)|`` of ``pset.size()``, 0-dim.

    The size is the set's own: cardinality for a :class:`~sciml.uq.sets.LabelSet`, width for an
    :class:`~sciml.uq.sets.Interval`, log-volume for a :class:`~sciml.uq.sets.Box`. ``+inf`` if any set is
    unbounded.
    """
    size = pset.size()
    if size.numel() == 0:
        raise ValueError("mean size of an empty batch of sets is undefined")
    return size.mean()


def mean_width(interval: PredictionSet) -> Tensor:
    """Mean width ``(1/m) Σ_i (u_i - l_i)`` of an interval; :func:`set_size` under its interval name."""
    return set_size(interval)


def bounded_width(pset: PredictionSet) -> tuple[float, float]:
    """``(mean size of the bounded sets, fraction of sets that are unbounded)``.

    :func:`set_size` is ``+inf`` as soon as one set is unbounded; this separates the two numbers a report needs.
    The mean is NaN when every set is unbounded.
    """
    size = pset.size()
    if size.numel() == 0:
        raise ValueError("mean size of an empty batch of sets is undefined")
    bounded = torch.isfinite(size)
    return float(size[bounded].mean()), float(1 - bounded.double().mean())


def group_coverage(pset: PredictionSet, y: Tensor, groups: Tensor) -> tuple[Tensor, Tensor]:
    """Coverage inside each group, ``cov_g = mean_{i : g_i = g} 1[y_i ∈ C(x_i)]``.

    Parameters
    ----------
    pset : PredictionSet
        Sets for ``m`` examples; ``contains(y)`` has shape ``(m, ...)`` (trailing entries are averaged).
    y : torch.Tensor
        Targets, the shape the set expects.
    groups : torch.Tensor
        Integer group label of each example, shape ``(m,)``.

    Returns
    -------
    tuple of torch.Tensor
        ``(ids, cov)``: the sorted distinct groups, shape ``(G,)``, and their coverages, shape ``(G,)``.

    """
    hit = pset.contains(y)
    if groups.dim() != 1 or groups.is_floating_point() or hit.dim() == 0 or hit.shape[0] != groups.numel():
        raise ValueError(
            f"groups must be integer labels of shape (m,), one per set; got {tuple(groups.shape)}"
        )
    if groups.numel() == 0:
        raise ValueError("group coverage of an empty set of targets is undefined")
    hit = hit.reshape(groups.numel(), -1).to(_float_dtype(y)).mean(-1)
    ids, inverse, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    return ids, hit.new_zeros(ids.numel()).index_add_(0, inverse, hit) / counts


def worst_group_coverage(pset: PredictionSet, y: Tensor, groups: Tensor) -> Tensor:
    """Smallest per-group coverage ``min_g cov_g`` (see :func:`group_coverage`), 0-dim."""
    return group_coverage(pset, y, groups)[1].min()


def _covered(covered: Tensor) -> Tensor:
    if not isinstance(covered, Tensor) or covered.dim() != 1 or covered.numel() == 0:
        raise ValueError("covered must be a non-empty 1-D tensor of shape (T,), one entry per time step")
    return covered.to(torch.float64)


def long_run_coverage(covered: Tensor) -> Tensor:
    """Return the running coverage ``(1/t) Σ_{s <= t} 1[y_s ∈ C_s]`` for ``t = 1..T`` (online methods).

    ``covered`` is a bool or 0/1 tensor of shape ``(T,)``; returns float64 ``(T,)``, the last entry being the
    long-run coverage over the whole stream (``1 - `` the long-run miscoverage of Gibbs & Candès 2021).
    """
    hit = _covered(covered)
    return hit.cumsum(0) / torch.arange(1, hit.numel() + 1, dtype=torch.float64, device=hit.device)


def rolling_coverage(covered: Tensor, window: int) -> Tensor:
    """Coverage over sliding windows, ``(1/w) Σ_{s=t-w+1}^{t} 1[y_s ∈ C_s]``, float64 ``(T - w + 1,)``."""
    hit = _covered(covered)
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= hit.numel():
        raise ValueError(f"window must be an integer in [1, {hit.numel()}], got {window!r}")
    cum = torch.cat([hit.new_zeros(1), hit.cumsum(0)])
    return (cum[window:] - cum[:-window]) / window


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


def coverage_miss_probability(n_calib: int, n_test: int, alpha: float, tol: float) -> float:
    """Probability that an exactly calibrated group's test coverage lies more than ``tol`` from ``1 - α``.

    The resolution of a per-group coverage check: a group with ``n_calib`` calibration and ``n_test`` test points,
    calibrated by split conformal within the group, has test coverage ``c ~ Beta(k, n_calib + 1 - k)`` given the
    calibration draw, ``k = ⌈(n_calib + 1)(1 - α)⌉`` (Vovk 2012; Angelopoulos & Bates 2021, §C), and ``n_test · ĉ``
    is binomial given ``c``: beta-binomial overall. Summed over groups this is the number of groups a perfect
    group-conditional method is expected to put outside ``±tol`` on one split (a sum of marginals, whatever the
    overlap of the groups).

    Parameters
    ----------
    n_calib, n_test : int
        Calibration and test points of the group.
    alpha : float
        Miscoverage; the check is ``|ĉ - (1 - α)| > tol``.
    tol : float
        Tolerance of the check, e.g. ``0.03``.

    """
    from scipy.stats import betabinom

    alpha = check_alpha(alpha)
    if n_calib < 1 or n_test < 1:
        raise ValueError(f"n_calib and n_test must be >= 1, got {n_calib} and {n_test}")
    k = conformal_rank(n_calib, alpha)
    if k > n_calib:  # too few calibration points: the set is everything, coverage 1
        return float(alpha > tol)
    counts = betabinom(n_test, k, n_calib + 1 - k)
    low = math.ceil(n_test * (1 - alpha - tol) - 1e-9) - 1  # the largest count below n (1 - α - tol)
    high = math.floor(n_test * (1 - alpha + tol) + 1e-9)  # counts above it are above n (1 - α + tol)
    return float(counts.cdf(low) + counts.sf(high))
