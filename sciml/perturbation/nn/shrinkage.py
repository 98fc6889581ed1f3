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
null effects and its own effect scales (the per-condition ash of, e.g., differential-expression screens);
``flow.denoise: eb_joint`` does the same to the singles estimated jointly with the training doubles
(:mod:`sciml.perturbation.nn.joint`).
"""

from __future__ import annotations

import torch
from torch import Tensor

N_SCALES = 24  # normal components besides the point mass at zero
EM_ITERATIONS = 3000  # EM steps at most; it stops once the mean log-likelihood gains less than EM_TOLERANCE
EM_TOLERANCE = 1e-10
FIT_EFFECTS = 1000  # effects per row the mixture weights are fitted on (a seeded subsample of wider rows)


def scale_grid(delta: Tensor, var: Tensor, n: int = N_SCALES) -> Tensor:
    """``(R, n + 1)`` prior scales per row of ``delta``, ``var`` ``(R, J)``: 0, then geometric over the row.

    The first scale is the point mass at zero; the others run geometrically from ``min s.e./10`` to ``2 max |Δ|``.
    """
    low = (var.clamp_min(0).sqrt().amin(-1) / 10).clamp_min(1e-8)
    high = torch.maximum(2 * delta.abs().amax(-1), 2 * low)
    steps = torch.linspace(0.0, 1.0, n, dtype=torch.float64, device=delta.device)
    grid = torch.exp(low.log()[:, None] + steps[None, :] * (high.log() - low.log())[:, None])
    return torch.cat([torch.zeros_like(grid[:, :1]), grid], -1)


def _log_marginal(delta: Tensor, var: Tensor, scales: Tensor) -> Tensor:
    """``log N(Δ_rj; 0, σ_rk² + v_rj)`` up to the constant ``−½ log 2π``, shape ``(R, J, K + 1)``."""
    total = scales.square()[:, None, :] + var[..., None]
    return -0.5 * (delta[..., None].square() / total + total.log())


def _em_step(lik: Tensor, pi: Tensor) -> Tensor:
    """One EM update of the mixture weights ``(R, K + 1)``: each row's mean posterior membership of its effects."""
    post = lik * pi[:, None, :]
    return (post / post.sum(-1, keepdim=True)).mean(-2)


def _log_likelihood(lik: Tensor, pi: Tensor) -> Tensor:
    """Mean log marginal likelihood per row, ``(R,)``."""
    return (lik @ pi[..., None]).squeeze(-1).log().mean(-1)


def fit_weights(lik: Tensor, iterations: int = EM_ITERATIONS) -> Tensor:
    """Mixture weights ``(R, K + 1)`` maximising each row's ``mean_j log Σ_k π_k L_rjk``, ``lik`` ``(R, J, K + 1)``.

    EM accelerated by SQUAREM (Varadhan & Roland 2008, *Scand. J. Stat.* 35:335, scheme S3), the rows batched: two
    EM steps give ``r`` and ``v``, the step length ``α = −‖r‖/‖v‖`` (at most −1) extrapolates, the result is
    projected back onto the simplex and stabilised by one more EM step, and kept only if it does not lower the
    likelihood. A row stops once its mean log-likelihood gains less than :data:`EM_TOLERANCE` (so each row gets
    what it would get alone).
    """
    pi = torch.full((lik.shape[0], lik.shape[-1]), 1.0 / lik.shape[-1], dtype=lik.dtype, device=lik.device)
    best = _log_likelihood(lik, pi)
    active = torch.arange(lik.shape[0], device=lik.device)
    for _ in range(max(iterations // 3, 1)):
        sub, cur = lik[active], pi[active]
        one = _em_step(sub, cur)
        two = _em_step(sub, one)
        r, v = one - cur, two - 2 * one + cur
        alpha = (-r.norm(dim=-1) / v.norm(dim=-1).clamp_min(1e-300)).clamp_max(-1.0)[:, None]
        jump = (cur - 2 * alpha * r + alpha**2 * v).clamp_min(0.0)
        jump = _em_step(sub, jump / jump.sum(-1, keepdim=True))
        value, fallback = _log_likelihood(sub, jump), _log_likelihood(sub, two)
        worse = ~(value >= fallback)  # also NaN
        pi[active] = torch.where(worse[:, None], two, jump)
        value = torch.where(worse, fallback, value)
        gain, best[active] = value - best[active], value
        active = active[~(gain < EM_TOLERANCE)]
        if len(active) == 0:
            break
    return pi


def fit_columns(n: int, limit: int | None = None) -> Tensor | None:
    """Columns the mixture weights are fitted on: ``None`` (all) for ``n ≤ limit``, else ``limit`` of them, seeded.

    ``limit`` ``None``: :data:`FIT_EFFECTS` (``None`` there too: every column).

    The prior has ``N_SCALES + 1`` weights; ``limit`` effects per row estimate them about as well as all of a wide
    panel's (docs/benchmarks.md, "Perturbation at width"), at a fixed cost per row. The posterior means are then
    taken for every effect.
    """
    limit = FIT_EFFECTS if limit is None else limit
    if limit is None or n <= limit:
        return None
    return torch.randperm(n, generator=torch.Generator().manual_seed(0))[:limit].sort().values


def _posterior_rows(d: Tensor, v: Tensor, iterations: int) -> Tensor:
    """Posterior means ``(R, J)`` of float64 effects ``d`` and variances ``v`` ``(R, J)``, one fitted prior per row.

    The scale grid is each row's whole range; the weights are fitted on :func:`fit_columns` of the row.
    """
    v = v.clamp_min(1e-12)
    scales = scale_grid(d, v)
    logp = _log_marginal(d, v, scales)
    cols = fit_columns(d.shape[-1])
    fit = logp if cols is None else logp[:, cols]
    pi = fit_weights((fit - fit.amax(-1, keepdim=True)).exp(), iterations)  # rows rescaled: the same fit
    weights = (logp + pi.clamp_min(1e-300).log()[:, None, :]).softmax(-1)
    shrink = scales.square()[:, None, :] / (scales.square()[:, None, :] + v[..., None])
    return (weights * shrink).sum(-1) * d


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
    post = _posterior_rows(delta.double().reshape(1, -1), var.double().reshape(1, -1), iterations)
    return post.reshape(delta.shape).to(delta.dtype)


def ash_by_row(delta: Tensor, var: Tensor, iterations: int = EM_ITERATIONS) -> Tensor:
    """:func:`ash_posterior_mean` with one prior per row: ``delta``, ``var`` ``(R, G)`` → ``(R, G)``.

    The rows are fitted together (batched EM), each to convergence.
    """
    if delta.shape != var.shape or delta.ndim != 2:
        raise ValueError(f"delta {tuple(delta.shape)} and var {tuple(var.shape)} must be one (rows, genes) shape")
    if delta.numel() == 0:
        return delta.clone()
    return _posterior_rows(delta.double(), var.double(), iterations).to(delta.dtype)
