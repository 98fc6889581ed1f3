r"""Calibration when labels cost: a label-free stopping rule for the calibration-set size.

Reference: calibration with costly labels (ICML 2026). Labels are
queried one at a time; after ``m`` labels the set is split conformal on those ``m`` scores. Total cost
``c m + E[set size]``: stop at the first ``m`` where one more label is expected to shrink the set by less than
the label cost ``c``.

**Keeping the guarantee.** The decision uses *unlabelled* data only: candidate scores ``s̃`` (plug-in scores
drawn from the model itself, e.g. ``ỹ ~ p̂(·|x)`` for a classifier, ``ε σ(x)`` for a regressor with a
variance head) and a size function ``size(q)`` measured on unlabelled points. The stopping time ``m*`` is
therefore independent of the calibration labels, and split conformal on the first ``m*`` labelled points
keeps ``P(Y ∈ C) >= 1 - α`` (mean ``k/(m*+1)``) exactly as for a fixed ``m``.

Expected size with ``m`` labels: the threshold is the ``k``-th order statistic, ``k = ⌈(m+1)(1-α)⌉``, i.e.
``F^{-1}(U)`` with ``U ~ Beta(k, m+1-k)``; with ``F̂`` the candidate-score ECDF,
``E_m = ∫ size(F̂^{-1}(u)) Beta(u; k, m+1-k) du`` (midpoint quadrature), and ``size(+inf)`` when ``k > m``.
Because ``k(m)`` jumps by whole ranks, ``E_m`` is saw-toothed in ``m``; the rule compares the mean decrease
over the next ``p = ⌈1/α⌉`` labels (one period) with ``c``:
``m* = min{m >= m_min : (E_m - E_{m+p})/p < c}``, ``m_min = ⌈1/α⌉ - 1`` (the smallest finite threshold).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._checks import check_scores, positive_real
from ..quantile import check_alpha, conformal_rank

__all__ = ["expected_size", "stopping_size"]


def expected_size(candidates: Tensor, size_at: Callable[[Tensor], Tensor], m: int, alpha: float,
                  n_quad: int = 400) -> float:
    """``E_m``: expected set size after ``m`` labels (module docstring), from candidate scores ``(N,)``.

    ``size_at(q)`` maps thresholds ``(G,)`` to mean set sizes ``(G,)`` on unlabelled data.
    """
    k = conformal_rank(m, alpha)
    if k > m:
        return float(size_at(torch.tensor([math.inf], dtype=torch.float64))[0])
    u = (torch.arange(n_quad, dtype=torch.float64) + 0.5) / n_quad
    log_pdf = (k - 1) * u.log() + (m - k) * (1 - u).log()
    w = torch.softmax(log_pdf, 0)
    sorted_c = candidates.double().sort().values
    idx = (u * sorted_c.numel()).ceil().long().clamp(1, sorted_c.numel()) - 1
    return float((w * size_at(sorted_c[idx])).sum())


def stopping_size(candidates: Tensor, size_at: Callable[[Tensor], Tensor], alpha: float, cost: float,
                  m_max: int = 5000, lookahead: int | None = None) -> int:
    """Label-free stopping size ``m*`` (module docstring); ``m_max`` if the rule never fires before it.

    Parameters
    ----------
    candidates : torch.Tensor
        Plug-in candidate scores from unlabelled data, shape ``(N,)``.
    size_at : callable
        ``q (G,) -> mean set size (G,)`` on unlabelled data (width, label count, ...).
    alpha : float
        Miscoverage.
    cost : float
        Cost of one label in set-size units, ``> 0``.
    m_max : int
        Label budget.
    lookahead : int, optional
        Period ``p`` of the comparison (default ``⌈1/α⌉``).

    """
    check_scores(candidates)
    alpha, cost = check_alpha(alpha), positive_real(cost, "cost")
    p = lookahead or math.ceil(1 / alpha)
    m = max(math.ceil(1 / alpha) - 1, 1)
    cache: dict[int, float] = {}

    def e(n: int) -> float:
        if n not in cache:
            cache[n] = expected_size(candidates, size_at, n, alpha)
        return cache[n]

    while m < m_max:
        if (e(m) - e(m + p)) / p < cost:
            return m
        m += 1
    return m_max
