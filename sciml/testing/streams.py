"""Adversarial nonconformity-score streams for testing online calibrators (seeded by a torch Generator)."""

from __future__ import annotations

import math

import torch


def regime_switch(t: int, g: torch.Generator) -> torch.Tensor:
    """|N(0, 1)| scores, shape (t,), whose scale jumps ×10 at t/2."""
    scale = torch.where(torch.arange(t) < t // 2, 1.0, 10.0).double()
    return (scale * torch.randn(t, generator=g, dtype=torch.float64)).abs()


def drift(t: int, g: torch.Generator) -> torch.Tensor:
    """|N(0, σ_t²)| scores, shape (t,), with σ_t growing linearly from 1 to 5."""
    return ((1 + 4 * torch.arange(t) / t) * torch.randn(t, generator=g, dtype=torch.float64)).abs()


def heavy_tailed(t: int, g: torch.Generator) -> torch.Tensor:
    """|Cauchy| scores (no mean), shape (t,), with the scale ×10 on every other block of 500 steps."""
    u = torch.rand(t, generator=g, dtype=torch.float64)
    scale = 1.0 + 9.0 * ((torch.arange(t) // 500) % 2).double()
    return (scale * torch.tan(math.pi * (u - 0.5))).abs()
