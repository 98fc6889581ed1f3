r"""Conditional flow-matching paths and the multi-RBF MMD loss (Lipman et al. 2023; Tong et al. 2024).

Affine path between a source ``x_0`` and a perturbed cell ``x_1``:
``x_t = (1 − t)·x_0 + t·x_1``, target velocity ``u_t = x_1 − x_0``, ``t ~ U(0, 1)``. The variants differ in the
source only (template method, as torchcfm's ``ConditionalFlowMatcher``):

* :class:`NoisePath`: ``x_0 ~ N(0, σ²I)``; control cells are a conditioning input (scDFM);
* :class:`ControlPath`: ``x_0`` = control cells, re-paired to the perturbed cells by exact minibatch optimal
  transport on squared Euclidean cost within each condition (Tong et al. 2024, OT-CFM), plus ``σ``-noise.

The one-step endpoint ``x̂_1 = x_t + (1 − t)·v_θ(x_t, t)`` enters the MMD term of scDFM.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor


class FlowPath:
    """Affine conditional path; subclasses define :meth:`initial` (and :meth:`pair`).

    Parameters
    ----------
    sigma : float
        Standard deviation of the Gaussian source (:class:`NoisePath`) or of the noise added to the
        control source (:class:`ControlPath`).

    """

    name = "base"

    def __init__(self, sigma: float = 1.0) -> None:
        self.sigma = float(sigma)

    def pair(self, x1: Tensor, x_ctrl: Tensor) -> Tensor:
        """Control cells re-ordered to pair with ``x1`` (both ``(C, N, G)``); identity by default."""
        return x_ctrl

    def initial(self, x_ctrl: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Start ``x_0`` of the flow given (paired) control cells ``(C, N, G)``; used in training and sampling."""
        raise NotImplementedError

    def source(self, x1: Tensor, x_ctrl: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Source samples ``x_0`` for the targets ``x1`` ``(C, N, G)``: ``initial(pair(x1, x_ctrl))``."""
        return self.initial(self.pair(x1, x_ctrl), generator)

    @staticmethod
    def interpolate(x0: Tensor, x1: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """``(x_t, u_t)`` for ``t`` of shape ``x0.shape[:-1]``."""
        t = t[..., None]
        return (1 - t) * x0 + t * x1, x1 - x0

    @staticmethod
    def endpoint(x_t: Tensor, t: Tensor, v: Tensor) -> Tensor:
        """One-step endpoint ``x̂_1 = x_t + (1 − t)·v``."""
        return x_t + (1 - t[..., None]) * v


def _randn_like(x: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)


class NoisePath(FlowPath):
    """Gaussian noise → perturbed cells, conditioned on control cells (scDFM)."""

    name = "noise"

    def initial(self, x_ctrl: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.sigma * _randn_like(x_ctrl, generator)


def ot_pairing(x0: Tensor, x1: Tensor) -> Tensor:
    """Permutation ``π`` ``(C, N)`` minimising ``Σ_i ‖x0[c, π_i] − x1[c, i]‖²`` per condition (exact assignment)."""
    cost = squared_distances(x1, x0).detach().cpu().numpy()  # (C, N1, N0)
    perms = [linear_sum_assignment(c)[1] for c in cost]
    return torch.as_tensor(np.stack(perms), device=x0.device)


class ControlPath(FlowPath):
    """Control cells → perturbed cells with minibatch-OT pairing (``ot=False``: independent pairing)."""

    name = "control"

    def __init__(self, sigma: float = 0.1, ot: bool = True) -> None:
        super().__init__(sigma)
        self.ot = ot

    def pair(self, x1: Tensor, x_ctrl: Tensor) -> Tensor:
        if not self.ot:
            return x_ctrl
        perm = ot_pairing(x_ctrl, x1)
        return torch.gather(x_ctrl, 1, perm[..., None].expand_as(x_ctrl))

    def initial(self, x_ctrl: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return x_ctrl + self.sigma * _randn_like(x_ctrl, generator)


PATHS = {"noise": NoisePath, "control": ControlPath}


def squared_distances(x: Tensor, y: Tensor) -> Tensor:
    """``‖x_i − y_j‖²`` ``(..., n, m)`` for ``x`` ``(..., n, d)``, ``y`` ``(..., m, d)`` (clamped at 0)."""
    d2 = (x * x).sum(-1)[..., :, None] + (y * y).sum(-1)[..., None, :] - 2 * x @ y.transpose(-1, -2)
    return d2.clamp_min(0)


def mmd2(x: Tensor, y: Tensor, scales: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0), unbiased: bool = True) -> Tensor:
    r"""Squared MMD with a mixture of RBF kernels (Gretton et al. 2012), batched over leading dims.

    ``k(a, b) = Σ_s exp(−‖a − b‖² / (s·m))`` with ``m`` the median squared distance of the pooled sample
    (detached). ``unbiased=True`` drops the diagonal terms (U-statistic; can be slightly negative, zero in
    expectation when ``x, y`` share a law); ``unbiased=False`` is the V-statistic, ``≥ 0`` always.

    Parameters
    ----------
    x, y : Tensor
        ``(..., n, d)`` and ``(..., m, d)``, ``n, m ≥ 2``.
    scales : tuple of float
        Bandwidth multipliers ``s`` of the median heuristic (scDFM: 0.5, 1, 2, 4).
    unbiased : bool
        U-statistic (``True``) or V-statistic.

    Returns
    -------
    Tensor
        ``(...)``.

    """
    n, m = x.shape[-2], y.shape[-2]
    z = torch.cat([x, y], -2)
    d2 = squared_distances(z, z)
    off = ~torch.eye(n + m, dtype=torch.bool, device=z.device)
    median = d2.detach()[..., off].median(-1).values.clamp_min(1e-12)[..., None, None]
    k = sum(torch.exp(-d2 / (s * median)) for s in scales)
    kxx, kyy, kxy = k[..., :n, :n], k[..., n:, n:], k[..., :n, n:]
    if unbiased:
        sxx = (kxx.sum((-1, -2)) - kxx.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
        syy = (kyy.sum((-1, -2)) - kyy.diagonal(dim1=-2, dim2=-1).sum(-1)) / (m * (m - 1))
    else:
        sxx, syy = kxx.mean((-1, -2)), kyy.mean((-1, -2))
    return sxx + syy - 2 * kxy.mean((-1, -2))
