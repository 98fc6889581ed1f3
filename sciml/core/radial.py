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
    """Smooth envelope ``w(r) = ½(cos(π (r − r_on) / (r_c − r_on)) + 1)`` for ``r_on < r < r_c`` (Behler 2011).

    ``w = 1`` up to ``r_on`` (default 0: the plain cosine cutoff) and 0 from ``r_c`` on; ``w`` and ``w'`` are
    continuous, so an item entering or leaving the cutoff changes nothing abruptly.
    """

    def __init__(self, cutoff: float, onset: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= onset < cutoff:
            raise ValueError(f"cosine cutoff needs 0 <= onset < cutoff, got onset {onset}, cutoff {cutoff}")
        self.cutoff, self.onset = float(cutoff), float(onset)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """Envelope of ``r`` (any shape), same shape."""
        x = ((r - self.onset) / (self.cutoff - self.onset)).clamp(0.0, 1.0)
        return 0.5 * (torch.cos(math.pi * x) + 1.0)
