r"""Worst-slab coverage (WSC), a check of conditional coverage along feature directions.

Cauchois, Gupta, Duchi (2021), "Knowing what you know: valid and validated confidence sets in multiclass and
multilabel prediction", JMLR 22 (Sec. 4, "worst-slab coverage"); the estimator follows the reference code of
Romano, Sesia, Candès (2020, NeurIPS, ``wsc``). For slabs ``S_{v,a,b} = {x : a <= vᵀx <= b}``,

.. math::

    \mathrm{WSC}_n(C, \delta) = \min_{v \in V} \min_{a < b}
    \Big\{ \hat P_n\big(Y \in C(X) \mid X \in S_{v,a,b}\big) :\ \hat P_n(X \in S_{v,a,b}) \ge \delta \Big\}

over a finite set ``V`` of (by default random, uniform on the sphere) directions. Marginal coverage near
``1 - α`` with a WSC far below it reveals a region where the sets under-cover. The minimum over many slabs is
biased low on the points it was searched on; for an unbiased value, find the slab on one half of the data and
evaluate :meth:`Slab.coverage_on` on the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import finite_real, is_int
from ..sets import PredictionSet

__all__ = ["Slab", "worst_slab_coverage"]

_CHUNK = 1 << 20  # entries of the (start, end) window matrix evaluated at once


@dataclass(frozen=True)
class Slab:
    """The worst slab ``{x : lower <= direction · x <= upper}`` and its empirical coverage.

    Attributes
    ----------
    direction : torch.Tensor
        Unit vector ``v``, shape ``(p,)``.
    lower, upper : float
        Slab bounds ``a <= b`` on ``vᵀx`` (attained by data points).
    coverage : float
        Empirical coverage of the points inside the slab (the WSC value).
    mass : float
        Fraction of the points inside the slab, ``>= delta``.

    """

    direction: Tensor
    lower: float
    upper: float
    coverage: float
    mass: float

    def contains(self, x: Tensor) -> Tensor:
        """Bool ``(m,)``: ``lower <= vᵀx <= upper`` for features ``x`` of shape ``(m, p)``."""
        z = x.to(self.direction) @ self.direction
        return (z >= self.lower) & (z <= self.upper)

    def coverage_on(self, pset: PredictionSet, y: Tensor, x: Tensor) -> float:
        """Coverage of ``pset`` on the points of ``(x, y)`` inside the slab (held-out, unbiased WSC)."""
        inside = self.contains(x)
        if not inside.any():
            raise ValueError("no point of x falls inside the slab")
        return float(_per_example(pset, y)[inside].mean())


def _per_example(pset: PredictionSet, y: Tensor) -> Tensor:
    hit = pset.contains(y)
    if hit.dim() == 0 or hit.shape[0] == 0:
        raise ValueError("worst-slab coverage needs a non-empty batch of sets, contains(y) of shape (m, ...)")
    return hit.reshape(hit.shape[0], -1).to(torch.float64).mean(-1)


def _worst_window(z: Tensor, covered: Tensor, k: int) -> tuple[float, int, int]:
    """Min mean coverage over windows of >= k consecutive points along z (ties kept together)."""
    order = torch.argsort(z, stable=True)
    zs, c = z[order], covered[order]
    m = zs.numel()
    prefix = torch.cat([c.new_zeros(1), c.cumsum(0)])  # (m+1,)
    # Windows are [i, j) in sorted order; a tie in z cannot be split, so i and j must sit at tie boundaries.
    boundary = torch.ones(m + 1, dtype=torch.bool, device=z.device)
    boundary[1:-1] = zs[1:] > zs[:-1]
    ends = torch.arange(m + 1, device=z.device)
    best, best_i, best_j = math.inf, 0, m
    rows = max(1, _CHUNK // (m + 1))
    for start in range(0, m + 1, rows):
        i = torch.arange(start, min(start + rows, m + 1), device=z.device)
        length = ends[None, :] - i[:, None]
        mean = (prefix[None, :] - prefix[i][:, None]) / length.clamp_min(1)
        ok = (length >= k) & boundary[None, :] & boundary[i][:, None]
        mean = torch.where(ok, mean, torch.full_like(mean, math.inf))
        flat = int(mean.argmin())
        value = float(mean.reshape(-1)[flat])
        if value < best:
            best, best_i, best_j = value, int(i[flat // (m + 1)]), flat % (m + 1)
    return best, int(order[best_i]), int(order[best_j - 1])


def worst_slab_coverage(
    pset: PredictionSet,
    y: Tensor,
    x: Tensor,
    delta: float = 0.1,
    n_directions: int = 1000,
    directions: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Slab:
    """Worst-slab coverage of ``pset`` (formula above) and the slab attaining it.

    Parameters
    ----------
    pset : PredictionSet
        One set per example; ``contains(y)`` of shape ``(m, ...)`` is averaged over trailing entries.
    y : torch.Tensor
        Targets of the ``m`` examples, as ``pset.contains`` expects them.
    x : torch.Tensor
        Features defining the slabs, shape ``(m, p)``.
    delta : float
        Minimum fraction of points in a slab, in ``(0, 1]``.
    n_directions : int
        Number of random unit directions when ``directions`` is not given.
    directions : torch.Tensor or None
        Explicit directions ``(n, p)`` (normalised here), e.g. the coordinate axes.
    generator : torch.Generator or None
        Seeds the random directions.

    Returns
    -------
    Slab
        The worst slab, with its coverage (the WSC) and mass. Cost ``O(m²)`` per direction.

    """
    covered = _per_example(pset, y)
    m = covered.numel()
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[0] != m or not torch.isfinite(x).all():
        raise ValueError(f"x must be finite features of shape (m, p) with m = {m}")
    delta = finite_real(delta, "delta")
    if not 0 < delta <= 1:
        raise ValueError(f"'delta' must be in (0, 1], got {delta!r}")
    x = x.to(torch.float64)
    if directions is None:
        if not is_int(n_directions) or n_directions < 1:
            raise ValueError(f"'n_directions' must be a positive integer, got {n_directions!r}")
        directions = torch.randn(int(n_directions), x.shape[1], generator=generator, dtype=torch.float64)
    directions = directions.to(x)
    if directions.dim() != 2 or directions.shape[0] == 0 or directions.shape[1] != x.shape[1]:
        raise ValueError(f"directions must have shape (n, {x.shape[1]}) with n >= 1")
    norms = directions.norm(dim=-1, keepdim=True)
    if not (torch.isfinite(norms) & (norms > 0)).all():
        raise ValueError("directions must be finite, non-zero vectors")
    directions, covered = directions / norms, covered.to(x.device)
    k = max(1, math.ceil(delta * m - 1e-9))  # at least a fraction delta of the points
    best = (math.inf, 0, 0, 0)  # (coverage, direction index, lower point, upper point)
    for n, v in enumerate(directions):
        cov, lo, hi = _worst_window(x @ v, covered, k)
        if cov < best[0]:
            best = (cov, n, lo, hi)
    cov, n, lo, hi = best
    v = directions[n]
    z = x @ v
    return Slab(v, float(z[lo]), float(z[hi]), cov, float(((z >= z[lo]) & (z <= z[hi])).double().mean()))
