"""Per-type, per-irrep normalisation of block irreps (frozen from the training split).

For items (atoms or edges) of type ``t`` (element or element pair) and irreps component ``c``:

    x̂ = (x − μ_t) / σ_t,

with ``μ_t`` the training mean on invariant channels (``0e``) and zero elsewhere, and ``σ_t`` the RMS of
each irrep instance over its ``2L+1`` components and the training items (one scale per irrep instance, so
the map commutes with rotations). Dead channels (unused by the type, or identically zero in the training
data, e.g. the antisymmetric ``1e`` part of symmetric on-site ``p ⊗ p`` blocks) get ``σ = 0``: they
normalise to 0 and denormalise to exactly ``μ``, so the network can never put an error there. A type with no
training item at all (e.g. an N–N pair when no training molecule has two nitrogens) is dead in every channel:
the model then keeps H0 (+ the ridge, which has no weights for it either) instead of scaling untrained network
outputs by an arbitrary unit. This is the
"predict ΔH normalised per block type" of the design: magnitudes differ between core, valence, far pairs.
"""

from __future__ import annotations

import torch
from torch import nn

from sciml.core.e3nn_o3 import o3


def irrep_instances(irreps: o3.Irreps) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dim,)`` instance index of each component and ``(dim,)`` bool marking invariant (``0e``) components."""
    inst, scalar, k = [], [], 0
    for mul, ir in o3.Irreps(irreps):
        for _ in range(mul):
            inst += [k] * ir.dim
            scalar += [ir.l == 0 and ir.p == 1] * ir.dim
            k += 1
    return torch.tensor(inst), torch.tensor(scalar)


class IrrepsMoments:
    """Per-type item counts, sums and sums of squares ``(n_types, dim)`` (float64), added chunk by chunk.

    :meth:`statistics` gives the normaliser's ``(mean, std)`` of all the items added, so a training set far
    larger than memory is summarised one batch at a time: ``Σ(x − μ)² = Σx² − n μ²`` per component.
    """

    def __init__(self, n_types: int, dim: int) -> None:
        self.count = torch.zeros(n_types, dtype=torch.float64)
        self.sum = torch.zeros(n_types, dim, dtype=torch.float64)
        self.sumsq = torch.zeros(n_types, dim, dtype=torch.float64)

    def add(self, x: torch.Tensor, types: torch.Tensor) -> IrrepsMoments:
        """Add items ``x (n, dim)`` of types ``(n,)``; returns self."""
        x, types = x.detach().double().cpu(), types.cpu()
        self.count.index_add_(0, types, torch.ones(len(types), dtype=torch.float64))
        self.sum.index_add_(0, types, x)
        self.sumsq.index_add_(0, types, x * x)
        return self

    def statistics(self, irreps: o3.Irreps, floor: float = 1e-9) -> tuple[list, list]:
        """``(mean, std)`` as nested lists: the mean on ``0e`` components, the RMS about it per irrep instance."""
        inst, scalar = irrep_instances(irreps)
        n_inst = int(inst.max()) + 1 if len(inst) else 0
        n = self.count[:, None].clamp_min(1.0)
        mean = torch.where(scalar, self.sum / n, torch.zeros(()))
        ms = (self.sumsq / n - mean * (2 * self.sum / n - mean)).clamp_min(0.0)  # mean of (x − μ)² per component
        per_inst = torch.zeros(len(n), n_inst, dtype=torch.float64).index_add_(1, inst, ms)
        rms = (per_inst / torch.bincount(inst, minlength=n_inst)).sqrt()[:, inst]
        alive = (rms > floor) & (self.count[:, None] > 0)  # a type absent from training stays dead
        return mean.tolist(), torch.where(alive, rms, torch.zeros(())).tolist()


class IrrepsNormalizer(nn.Module):
    """Buffers ``mean``, ``std`` of shape ``(n_types, dim)``; see the module docstring."""

    def alive(self) -> torch.Tensor:
        """``(n_types, dim)`` bool: channels with a non-zero training scale."""
        return self.std > 0

    def __init__(self, mean, std) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float64))

    @staticmethod
    def identity(n_types: int, dim: int) -> tuple[list, list]:
        """``(mean, std)`` placeholders (zeros, ones) of shape ``(n_types, dim)``; a state dict fills them."""
        return torch.zeros(n_types, dim).tolist(), torch.ones(n_types, dim).tolist()

    @staticmethod
    def statistics(x: torch.Tensor, types: torch.Tensor, irreps: o3.Irreps, n_types: int,
                   floor: float = 1e-9) -> tuple[list, list]:
        """``(mean, std)`` as nested lists from items ``x (n, dim)`` with types ``(n,)``."""
        return IrrepsMoments(n_types, x.shape[1]).add(x, types).statistics(irreps, floor)

    def normalize(self, x: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """``(x − μ_t) / σ_t`` in ``x``'s dtype (0 on dead channels, ``σ_t = 0``)."""
        std = self.std[types].to(x)
        return torch.where(std > 0, (x - self.mean[types].to(x)) / std.clamp_min(1e-300), torch.zeros_like(x))

    def denormalize(self, x: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """``x̂ σ_t + μ_t`` in float64 (Hartree); exactly ``μ_t`` (0 off ``0e``) on dead channels."""
        return x.double() * self.std[types] + self.mean[types]


def clip_instances(x: torch.Tensor, inst: torch.Tensor, limit: float) -> torch.Tensor:
    """Shrink every irrep instance of ``x (n, dim)`` whose norm exceeds ``limit·√(2L+1)`` onto that sphere.

    ``inst (dim,)``: instance index of each component (:func:`irrep_instances`). On normalised inputs an instance
    has RMS ~1 per component in training, so ``limit`` counts training standard deviations. Norms are invariant,
    so the map commutes with rotations (E(3)-equivariant) and is the identity inside the ball: it only bounds
    inputs far outside the training range (an unseen short bond), where a polynomial network would extrapolate
    without bound.
    """
    n_inst = int(inst.max()) + 1 if len(inst) else 0
    sq = torch.zeros(x.shape[0], n_inst, dtype=x.dtype, device=x.device).index_add_(1, inst, x * x)
    bound = limit * torch.bincount(inst, minlength=n_inst).to(x).sqrt()
    factor = (bound / sq.sqrt().clamp_min(torch.finfo(x.dtype).tiny)).clamp(max=1.0)
    return x * factor[:, inst]
