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

* **closure** (optional, :func:`close`): in data normalised to a fixed total per cell over the measured genes
  (``log1p(counts / library · T)`` with every gene kept: ``Σ_g expm1(x_g) = T`` in every cell), a gene's value is a
  share of the cell's total, so losing or gaining mass in some genes moves all others (compositional data,
  Aitchison 1986; Gloor et al. 2017, *Front. Microbiol.* 8:2224). The singles' effects carry their own shift of
  the total; their sum double-counts it. :func:`close` rescales the prior mean of a double in linear space so
  that its expected total is again ``T``.
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


CLOSED_RTOL = 1e-4  # relative spread of the per-cell expm1 totals below which the data count as closed


def closure_terms(ctrl: Tensor) -> Tensor | None:
    """Control mean and closure weights ``(2, G)`` of control cells ``ctrl`` ``(n, G)`` (log1p), or ``None``.

    Row 0: ``μ0 = mean(x)``; row 1: ``w_g = E[expm1 x_g] / (expm1(μ0_g) · T)`` with ``T`` the cells' common
    ``Σ_g expm1(x_g)``: ``Σ_g w_g·expm1(m_g)`` is the expected total of a population with log1p means ``m``, over
    ``T``, to first order (``E[expm1 x] / expm1(E[x])``, the Jensen factor, taken from the controls); it is 1 at
    ``m = μ0``. ``None`` when the totals vary by more than :data:`CLOSED_RTOL` (relative): not closed data.
    """
    x = ctrl.double()
    total = torch.expm1(x).sum(-1)
    if len(x) == 0 or float(total.std() / total.mean().clamp_min(1e-12)) > CLOSED_RTOL:
        return None
    mu0 = x.mean(0)
    jensen = torch.expm1(x).mean(0) / torch.expm1(mu0).clamp_min(1e-12)
    return torch.stack([mu0, torch.where(mu0 > 0, jensen, torch.ones_like(mu0)) / total.mean()]).float()


def close(delta: Tensor, terms: Tensor) -> Tensor:
    """Effects ``(..., G)`` rescaled so the population's expected total is the controls' (module docstring).

    ``Δ' = log1p(s · expm1(m)) − μ0`` with ``m = max(μ0 + Δ, 0)`` and ``s = 1 / Σ_g w_g expm1(m_g)``; ``terms``
    from :func:`closure_terms`. ``Δ = 0`` is unchanged; a double whose singles each lose mass gets the others'
    upward shift of its own total, not the sum of theirs.
    """
    mu0, weight = terms[0].to(delta), terms[1].to(delta)
    linear = torch.expm1((mu0 + delta).clamp_min(0.0))
    scale = 1.0 / (weight * linear).sum(-1, keepdim=True).clamp_min(1e-12)
    return torch.log1p(scale * linear) - mu0
