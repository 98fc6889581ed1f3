r"""Conditional flow-matching paths (Lipman et al. 2023; Tong et al. 2024).

Affine path between a source ``x_0`` and a perturbed cell ``x_1``:
``x_t = (1 − t)·x_0 + t·x_1``, target velocity ``u_t = x_1 − x_0``, ``t ~ U(0, 1)``. The variants differ in the
source only (template method, as torchcfm's ``ConditionalFlowMatcher``):

* :class:`NoisePath`: ``x_0 ~ N(0, σ²I)``; control cells are a conditioning input (scDFM);
* :class:`ControlPath`: ``x_0`` = control cells, re-paired to the perturbed cells by exact minibatch optimal
  transport on squared Euclidean cost within each condition (Tong et al. 2024, OT-CFM), plus ``σ``-noise.

The one-step endpoint ``x̂_1 = x_t + (1 − t)·v_θ(x_t, t)`` enters the MMD term of scDFM
(:func:`sciml.perturbation.distances.mmd2`, the same function as the ``mmd`` metric).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sciml.perturbation.distances import ot_pairing


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
