r"""Empirical-Bayes shrinkage of measured effects: adaptive shrinkage with a normal scale mixture (ash).

Measured effects ``Δ_j`` with squared standard errors ``v_j`` (``Δ_j ~ N(β_j, v_j)``) share one prior on the true
effects, a mixture of a point mass at zero and zero-centred normals,

    β ~ π_0 δ_0 + Σ_k π_k N(0, σ_k²),        σ_1 < … < σ_K a fixed geometric grid,

whose weights ``π`` maximise the marginal likelihood ``Π_j Σ_k π_k N(Δ_j; 0, σ_k² + v_j)`` (EM with SQUAREM
acceleration, :func:`fit_weights`; Stephens 2017,
*Biostatistics* 18:275, "False discovery rates: a new deal"). Each effect is replaced by its posterior mean

    E[β_j | Δ_j] = Σ_k w_jk Δ_j σ_k² / (σ_k² + v_j),    w_jk ∝ π_k N(Δ_j; 0, σ_k² + v_j).

Unlike one James–Stein threshold per screen (:func:`sciml.perturbation.nn.masking.denoise`), the amount of shrinkage
is learned from all effects at once: a screen whose effects are mostly noise gets a large ``π_0`` and small
effects vanish, while effects far above their standard error are kept almost unchanged.

:func:`ash_by_row` fits one such prior per row of a ``(singles, genes)`` table (``flow.denoise: eb_single``): a
perturbation of a master regulator moves many genes, one of a leaf gene few, so each single gets its own share of
null effects and its own effect scales (the per-condition ash of, e.g., differential-expression screens).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

N_SCALES = 24  # normal components besides the point mass at zero
EM_ITERATIONS = 3000  # EM steps at most; it stops once the mean log-likelihood gains less than EM_TOLERANCE
EM_TOLERANCE = 1e-10


def scale_grid(delta: Tensor, var: Tensor, n: int = N_SCALES) -> Tensor:
    """``(n + 1,)`` prior scales: 0 (the point mass), then geometric from ``min s.e./10`` to ``2 max |Δ|``."""
    low = max(float(var.clamp_min(0).sqrt().min()) / 10, 1e-8)
    high = max(2 * float(delta.abs().max()), 2 * low)
    like = {"dtype": torch.float64, "device": delta.device}
    return torch.cat([torch.zeros(1, **like), torch.logspace(math.log10(low), math.log10(high), n, **like)])


def _log_marginal(delta: Tensor, var: Tensor, scales: Tensor) -> Tensor:
    """``log N(Δ_j; 0, σ_k² + v_j)`` up to the constant ``−½ log 2π``, shape ``(J, K + 1)``."""
    total = scales.square()[None, :] + var[:, None]
    return -0.5 * (delta[:, None].square() / total + total.log())


def _em_step(lik: Tensor, pi: Tensor) -> Tensor:
    """One EM update of the mixture weights: the mean posterior membership of the effects."""
    post = lik * pi[None, :]
    return (post / post.sum(1, keepdim=True)).mean(0)


def _log_likelihood(lik: Tensor, pi: Tensor) -> float:
    return float((lik @ pi).log().mean())


def fit_weights(lik: Tensor, iterations: int = EM_ITERATIONS) -> Tensor:
    """Mixture weights ``(K + 1,)`` maximising ``mean_j log Σ_k π_k L_jk`` for likelihoods ``lik`` ``(J, K + 1)``.

    EM accelerated by SQUAREM (Varadhan & Roland 2008, *Scand. J. Stat.* 35:335, scheme S3): two EM steps give
    ``r`` and ``v``, the step length ``α = −‖r‖/‖v‖`` (at most −1) extrapolates, the result is projected back onto
    the simplex and stabilised by one more EM step, and kept only if it does not lower the likelihood. Stops when the
    mean log-likelihood gains less than :data:`EM_TOLERANCE`.
    """
    pi = torch.full((lik.shape[1],), 1.0 / lik.shape[1], dtype=lik.dtype, device=lik.device)
    best = _log_likelihood(lik, pi)
    for _ in range(max(iterations // 3, 1)):
        one = _em_step(lik, pi)
        two = _em_step(lik, one)
        r, v = one - pi, two - 2 * one + pi
        alpha = min(-float(r.norm()) / max(float(v.norm()), 1e-300), -1.0)
        jump = (pi - 2 * alpha * r + alpha**2 * v).clamp_min(0.0)
        jump = _em_step(lik, jump / jump.sum())
        value = _log_likelihood(lik, jump)
        if not value >= _log_likelihood(lik, two):
            jump, value = two, _log_likelihood(lik, two)
        pi, gain, best = jump, value - best, value
        if gain < EM_TOLERANCE:
            break
    return pi


def ash_posterior_mean(delta: Tensor, var: Tensor, iterations: int = EM_ITERATIONS) -> Tensor:
    """Posterior means (same shape and dtype as ``delta``) under the fitted mixture prior (module docstring).

    Parameters
    ----------
    delta : Tensor
        Measured effects, any shape (e.g. ``(singles, genes)``, log1p units).
    var : Tensor
        Their squared standard errors, same shape, ≥ 0 (a zero is treated as 1e-12: the effect is kept).
    iterations : int
        Most EM steps for the mixture weights (plain EM is slow near the optimum: on 5,000 effects under a N(0, 1)
        prior, 200 plain steps leave the posterior means 0.05 s.d. from the converged ones).

    """
    if delta.shape != var.shape:
        raise ValueError(f"delta {tuple(delta.shape)} and var {tuple(var.shape)} must have the same shape")
    if delta.numel() == 0:
        return delta.clone()
    d, v = delta.double().reshape(-1), var.double().reshape(-1).clamp_min(1e-12)
    scales = scale_grid(d, v)
    logp = _log_marginal(d, v, scales)
    pi = fit_weights((logp - logp.max(1, keepdim=True).values).exp(), iterations)  # rows rescaled: the same fit
    weights = (logp + pi.clamp_min(1e-300).log()).softmax(1)
    factor = (weights * (scales.square()[None, :] / (scales.square()[None, :] + v[:, None]))).sum(1)
    return (factor * d).reshape(delta.shape).to(delta.dtype)


def ash_by_row(delta: Tensor, var: Tensor, iterations: int = EM_ITERATIONS) -> Tensor:
    """:func:`ash_posterior_mean` with one prior per row: ``delta``, ``var`` ``(R, G)`` → ``(R, G)``."""
    if delta.shape != var.shape or delta.ndim != 2:
        raise ValueError(f"delta {tuple(delta.shape)} and var {tuple(var.shape)} must be one (rows, genes) shape")
    if len(delta) == 0:
        return delta.clone()
    return torch.stack([ash_posterior_mean(d, v, iterations) for d, v in zip(delta, var, strict=True)])


EB_DENOISERS = {"eb": ash_posterior_mean, "eb_single": ash_by_row}  # flow.denoise: one prior for all, or per single
