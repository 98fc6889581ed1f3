r"""Active prediction-powered mean estimation with a CLT confidence interval.

References: Zrnic & Candès (2024), "Active statistical inference", ICML; the ICLR 2026 revisit. Each of ``T``
points is labelled with probability ``π_t``; with ``ξ_t ~ Bernoulli(π_t)``

.. math::  \hat θ = \frac1T \sum_t \Big[f(X_t) + (Y_t - f(X_t)) \frac{ξ_t}{π_t}\Big], \qquad
           π_t = (1-τ)\,π^{unc}_t + τ\,b,

unbiased for ``E[Y]`` whatever ``f``. ``π^{unc} ∝ u(X)`` (an uncertainty, e.g. a predicted ``σ``) rescaled to
mean budget ``b`` and clipped to ``[π_min, 1]``; ``τ = 1`` is uniform sampling at rate ``b``. The interval is
``θ̂ ± z_{1-α/2} sd(z_t)/√T`` on the bracketed terms ``z_t`` (CLT; asymptotic ``1 - α`` coverage).
The ICLR 2026 revisit finds the interval is narrowest as ``τ → 1`` unless ``u`` tracks ``|Y - f|`` well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import finite_real
from ..quantile import check_alpha

__all__ = ["PPIEstimate", "active_ppi_mean", "query_probabilities"]


@dataclass(frozen=True)
class PPIEstimate:
    """Estimate ``θ̂``, interval ``[lower, upper]``, number of labels queried."""

    estimate: float
    lower: float
    upper: float
    n_labels: int

    @property
    def width(self) -> float:
        """Interval width ``upper - lower``."""
        return self.upper - self.lower


def query_probabilities(uncertainty: Tensor, budget: float, tau: float, pi_min: float = 0.01) -> Tensor:
    """``π = (1-τ) clip(b u / mean(u), π_min, 1) + τ b``, shape of ``uncertainty`` ``(T,)`` (all ``u >= 0``)."""
    budget, tau = finite_real(budget, "budget"), finite_real(tau, "tau")
    if not (0 < budget <= 1 and 0 <= tau <= 1):
        raise ValueError(f"need budget in (0, 1] and tau in [0, 1], got {budget!r}, {tau!r}")
    u = uncertainty.double()
    if u.dim() != 1 or not (torch.isfinite(u) & (u >= 0)).all() or u.sum() <= 0:
        raise ValueError("uncertainty must be a 1-D tensor of finite values >= 0, not all zero")
    pi_unc = (budget * u / u.mean()).clamp(pi_min, 1.0)
    return (1 - tau) * pi_unc + tau * budget


def active_ppi_mean(pred: Tensor, label: Tensor, uncertainty: Tensor, budget: float, tau: float,
                    alpha: float = 0.1, generator: torch.Generator | None = None) -> PPIEstimate:
    """Active PPI estimate of ``E[Y]`` with a ``1 - α`` CLT interval.

    Parameters
    ----------
    pred : torch.Tensor
        Model predictions ``f(X_t)``, shape ``(T,)``.
    label : torch.Tensor
        Labels ``Y_t``, shape ``(T,)``; only the queried entries are read (the others may be NaN).
    uncertainty : torch.Tensor
        ``u(X_t) >= 0``, shape ``(T,)``.
    budget, tau : float
        Mean query rate ``b ∈ (0, 1]`` and mixing weight ``τ ∈ [0, 1]``.
    alpha : float
        Miscoverage of the interval.
    generator : torch.Generator, optional
        Source of the query coins ``ξ_t``.

    """
    alpha = check_alpha(alpha)
    if not (pred.shape == label.shape == uncertainty.shape) or pred.dim() != 1 or pred.numel() < 2:
        raise ValueError("pred, label and uncertainty must share one shape (T,) with T >= 2")
    pi = query_probabilities(uncertainty, budget, tau)
    xi = torch.rand(pi.shape, generator=generator, dtype=torch.float64) < pi
    f = pred.double()
    correction = torch.where(xi, (label.double() - f) / pi, torch.zeros_like(f))
    if not torch.isfinite(correction).all():
        raise ValueError("a queried label is not a finite number")
    z = f + correction
    est, se = float(z.mean()), float(z.std()) / math.sqrt(z.numel())
    half = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - alpha / 2)).item() * se
    return PPIEstimate(est, est - half, est + half, int(xi.sum()))
