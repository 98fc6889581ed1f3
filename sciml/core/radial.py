"""Radial basis functions and smooth cutoff envelopes."""

from __future__ import annotations

import math

import torch
from torch import nn


class GaussianBasis(nn.Module):
    """Gaussian radial basis ``φ_k(r) = exp(-(r - μ_k)² / (2 s²))`` on evenly spaced centres.

    Parameters
    ----------
    start, stop : float
        First and last centre ``μ_0``, ``μ_{K-1}`` (unit of ``r``: Å for distances, Å⁻¹ for |G|).
    n : int
        Number of centres ``K``; the width ``s`` equals the centre spacing.

    """

    def __init__(self, start: float, stop: float, n: int) -> None:
        super().__init__()
        if n < 2 or stop <= start:
            raise ValueError(f"GaussianBasis needs n >= 2 and stop > start, got n={n}, [{start}, {stop}]")
        self.register_buffer("centres", torch.linspace(start, stop, n), persistent=False)
        self.width = (stop - start) / (n - 1)
        self.n = n

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """Expand ``r`` of shape ``(...)`` into ``(..., K)``."""
        centres = self.centres.to(r.dtype)
        return torch.exp(-0.5 * ((r.unsqueeze(-1) - centres) / self.width) ** 2)


class CosineCutoff(nn.Module):
    """Smooth envelope ``w(r) = ½(cos(π r / r_c) + 1)`` for ``r < r_c``, else 0 (Behler 2011).

    ``w`` and ``w'`` vanish at ``r_c``, so an item entering or leaving the cutoff changes nothing abruptly.
    """

    def __init__(self, cutoff: float) -> None:
        super().__init__()
        self.cutoff = float(cutoff)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """Envelope of ``r`` (any shape), same shape."""
        w = 0.5 * (torch.cos(math.pi * r / self.cutoff) + 1.0)
        return torch.where(r < self.cutoff, w, torch.zeros_like(r))
