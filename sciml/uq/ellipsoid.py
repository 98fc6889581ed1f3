r"""Ellipsoidal prediction sets, the sets of the Mahalanobis score (:class:`~sciml.uq.vector.Mahalanobis`).

.. math::

    E = \{y \in \mathbb{R}^d : \lVert L^{-1}(y - c) \rVert_2 \le r\},
    \qquad \log \mathrm{vol}(E) = \tfrac{d}{2}\log\pi - \log\Gamma(\tfrac{d}{2} + 1) + d \log r
    + \textstyle\sum_j \log L_{jj},

with ``Σ = L Lᵀ`` the shape matrix (closed-form log-volume).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Ellipsoid"]


@dataclass(frozen=True)
class Ellipsoid:
    """Ellipsoid ``{y : ‖L⁻¹(y - c)‖ <= r}``, one per example; implements the ``PredictionSet`` protocol.

    Attributes
    ----------
    center : torch.Tensor
        Centres ``c``, shape ``(..., d)``, in the target's unit.
    chol : torch.Tensor
        Lower-triangular Cholesky factor ``L`` of the shape matrix ``Σ = L Lᵀ``, shape ``(d, d)`` (shared) or
        ``(..., d, d)``, positive finite diagonal; only the lower triangle is read.
    radius : torch.Tensor
        Radii ``r >= 0``, shape ``()`` or broadcastable to ``center.shape[:-1]``; ``+inf`` is the whole space.

    Raises
    ------
    ValueError
        If shapes do not match, the diagonal of ``chol`` is not finite and positive, or a radius is negative
        or NaN.

    """

    center: Tensor
    chol: Tensor
    radius: Tensor

    def __post_init__(self) -> None:
        """Validate shapes, the Cholesky diagonal and the radii."""
        c, lo, r = self.center, self.chol, self.radius
        if not all(isinstance(t, Tensor) and t.is_floating_point() for t in (c, lo, r)):
            raise ValueError("Ellipsoid center, chol and radius must be floating tensors")
        if c.dim() == 0 or lo.dim() < 2 or lo.shape[-2:] != (c.shape[-1], c.shape[-1]):
            raise ValueError(
                f"Ellipsoid needs center (..., d) and chol (d, d) or (..., d, d); got {tuple(c.shape)} "
                f"and {tuple(lo.shape)}"
            )
        diag = lo.diagonal(dim1=-2, dim2=-1)
        if not (torch.isfinite(diag) & (diag > 0)).all():
            raise ValueError("Ellipsoid chol must have a finite, positive diagonal")
        if torch.isnan(r).any() or (r < 0).any():
            raise ValueError("Ellipsoid radius must be >= 0 and not NaN")
        batch = c.shape[:-1]
        try:
            ok = torch.broadcast_shapes(r.shape, lo.shape[:-2], batch) == batch
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"Ellipsoid radius {tuple(r.shape)} and chol batch {tuple(lo.shape[:-2])} must broadcast to the "
                f"centres' batch shape {tuple(batch)}"
            )

    def whitened_norm(self, y: Tensor) -> Tensor:
        """``‖L⁻¹(y - c)‖₂``, shape ``(...)``; the Mahalanobis score of ``y`` about the centre."""
        if y.shape != self.center.shape:
            raise ValueError(f"y has shape {tuple(y.shape)}, ellipsoid centres have {tuple(self.center.shape)}")
        diff = (y - self.center).unsqueeze(-1)
        z = torch.linalg.solve_triangular(self.chol.to(diff.dtype), diff, upper=False)
        return torch.linalg.vector_norm(z.squeeze(-1), dim=-1)

    def contains(self, y: Tensor) -> Tensor:
        """Bool ``‖L⁻¹(y - c)‖ <= r`` for ``y`` of shape ``center.shape``; result shape ``(...)``."""
        return self.whitened_norm(y) <= self.radius.to(self.center.dtype)

    def size(self) -> Tensor:
        """Log-volume (closed form above), shape ``(...)``: ``+inf`` for ``r = inf``, ``-inf`` for ``r = 0``."""
        d = self.center.shape[-1]
        log_unit_ball = 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d + 1)
        log_det = self.chol.diagonal(dim1=-2, dim2=-1).log().sum(-1).to(self.center.dtype)
        log_r = self.radius.to(self.center.dtype).log()
        batch = self.center.shape[:-1]
        return (log_unit_ball + d * log_r + log_det).expand(batch).clone()
