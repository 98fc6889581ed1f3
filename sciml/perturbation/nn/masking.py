r"""Masking prior for double perturbations: denoised singles, the smaller same-sign effect partly absorbed.

Per gene ``g`` of a double ``a+b`` with measured single effects ``Δ_a, Δ_b`` (log1p space) and their squared
standard errors ``v_a, v_b``:

* **denoise** (positive-part James–Stein shrinkage per entry, Efron & Morris 1973):
  ``Δ̃ = Δ · max(0, 1 − τ·v / Δ²)``; an effect within ``√τ`` standard errors of zero is set to zero, larger ones
  are shrunk by ``τ·v/Δ``. ``τ = 0`` keeps the measured effects.
* **mask**: ``Δ̂_ab = Δ̃_a + Δ̃_b − κ·s`` where ``s`` is the smaller-magnitude of the two when they have the same
  sign, else 0. ``κ = 0`` is the additive model, ``κ = 1`` the larger single alone (full masking / buffering:
  two perturbations acting through the same saturating path, Norman et al. 2019, Fig. 4).

``κ`` and ``τ`` are two scalars per screen, chosen on the training and val doubles
(:func:`sciml.perturbation.select.choose_masking`), so a screen without masking gets ``κ = 0``: additive.
"""

from __future__ import annotations

import torch
from torch import Tensor


def denoise(delta: Tensor, var: Tensor, tau: float) -> Tensor:
    """Positive-part James–Stein shrinkage of effects ``delta`` with squared standard errors ``var`` (same shape)."""
    if tau == 0.0:
        return delta
    return delta * (1.0 - tau * var / delta.square().clamp_min(1e-12)).clamp_min(0.0)


def masking(da: Tensor, db: Tensor, kappa: float) -> Tensor:
    """``Δ_a + Δ_b − κ·(smaller same-sign effect)``, elementwise over ``(..., G)``; symmetric in ``a, b``."""
    small = torch.where(da.abs() < db.abs(), da, db)
    same = torch.sign(da) == torch.sign(db)
    return da + db - kappa * torch.where(same, small, torch.zeros_like(small))


def masking_prior(da: Tensor, db: Tensor, va: Tensor, vb: Tensor, kappa: float, tau: float) -> Tensor:
    """Prior mean effect ``(..., G)`` of a double: :func:`masking` of the :func:`denoise`-d singles."""
    return masking(denoise(da, va, tau), denoise(db, vb, tau), kappa)
