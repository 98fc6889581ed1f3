r"""Empirical-Bayes shrinkage of measured effects: adaptive shrinkage with a normal scale mixture (ash).

Measured effects ``Δ_j`` with squared standard errors ``v_j`` (``Δ_j ~ N(β_j, v_j)``) share one prior on the true
effects, a mixture of a point mass at zero and zero-centred normals,

    β ~ π_0 δ_0 + Σ_k π_k N(0, σ_k²),        σ_1 < … < σ_K a fixed geometric grid,

whose weights ``π`` maximise the marginal likelihood ``Π_j Σ_k π_k N(Δ_j; 0, σ_k² + v_j)`` (a convex problem,
solved by a batched interior-point method to a certified gap, :func:`fit_weights`; Stephens 2017,
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

import logging

import torch
from torch import Tensor

log = logging.getLogger(__name__)

N_SCALES = 24  # normal components besides the point mass at zero
GAP_TOLERANCE = 1e-10  # a row's weights are fitted once its mean log-likelihood is certified this close to the maximum
MAX_STEPS = 100  # interior-point steps at most (about 20 are taken)
CENTERING = 0.1  # σ: each step aims at a tenth of the current complementarity x∘z
TO_BOUNDARY = 0.995  # share of the way to the boundary of x, z > 0 a step may go
POSTERIOR_ENTRIES = 2**22  # (row, effect, scale) terms of the posterior computed at once (float64: 32 MB each)
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


def duality_gap(lik: Tensor, pi: Tensor) -> Tensor:
    r"""Certified bound ``(R,)`` on how far each row's mean log-likelihood at ``pi`` is below its maximum.

    With ``f(π) = mean_j log L_j·π`` (``lik`` ``(R, J, K + 1)``, ``pi`` ``(R, K + 1)`` on the simplex) and
    ``g = ∇f(π)``, ``g_k = mean_j L_jk / L_j·π``, concavity gives for the optimum ``π*``

        f(π*) − f(π) ≤ g·(π* − π) ≤ max_k g_k − g·π = max_k g_k − 1,

    since ``g·π = 1``; the bound is 0 exactly at the optimum (the Kiefer–Wolfowitz optimality condition ``g_k ≤ 1``;
    Kim, Carbonetto, Stephens & Anitescu 2020, *J. Comput. Graph. Stat.* 29:261).
    """
    return (lik / (lik @ pi[..., None])).mean(-2).amax(-1) - 1.0


def _to_boundary(v: Tensor, dv: Tensor) -> Tensor:
    """Largest step ``(R,)`` in ``[0, 1]`` keeping ``v + t·dv`` ``(R, K)`` positive (:data:`TO_BOUNDARY` of the way)."""
    ratio = torch.where(dv < 0, -v / dv.clamp_max(-1e-300), torch.full_like(v, torch.inf))
    return (TO_BOUNDARY * ratio.amin(-1)).clamp_max(1.0)


def fit_weights(lik: Tensor) -> Tensor:
    r"""Mixture weights ``(R, K + 1)`` maximising each row's ``mean_j log Σ_k π_k L_rjk``, ``lik`` ``(R, J, K + 1)``.

    The problem is convex; on the relaxed form of Kim et al. (2020, the mix-SQP paper)

        min_{x ≥ 0}  φ(x) = −mean_j log L_j·x + Σ_k x_k,

    whose minimiser lies on the simplex and is the maximum-likelihood ``π``, a primal–dual interior-point method
    (the Kiefer–Wolfowitz NPMLE solver of Koenker & Mizera 2014, *JASA* 109:674) takes Newton steps on the
    perturbed optimality conditions ``∇φ(x) = z``, ``x_k z_k = σμ`` (``μ`` the mean of ``x∘z``, ``σ`` =
    :data:`CENTERING`):

        (∇²φ(x) + diag(z/x)) Δx = σμ/x − ∇φ(x),        Δz = (σμ − x∘z − z∘Δx) / x,

    ``∇²φ = mean_j a_j a_jᵀ`` with ``a_j = L_j / L_j·x``: one ``(K + 1)²`` solve per row and step, batched over the
    rows, each step cut to stay inside ``x, z > 0`` (:func:`_to_boundary`). A row stops once its
    :func:`duality_gap` at ``x / Σx`` is below :data:`GAP_TOLERANCE`, so each row gets what it would get alone;
    18 steps for the 100 singles × 1,000 genes of ``benchmarks/perturbation_scale.py``'s screen (the EM with SQUAREM
    it replaces took up to 3,000 and could stop on a small gain far from the optimum). A row still above the
    tolerance after :data:`MAX_STEPS` is logged.
    """
    r, _, k = lik.shape
    x = torch.full((r, k), 1.0 / k, dtype=lik.dtype, device=lik.device)
    z, pi = torch.ones_like(x), x.clone()
    active = torch.arange(r, device=lik.device)
    for step in range(MAX_STEPS + 1):
        gap = duality_gap(lik[active], pi[active])
        active = active[gap >= GAP_TOLERANCE]
        if len(active) == 0:
            break
        if step == MAX_STEPS:
            log.warning("ash: %d of %d rows above the gap tolerance %g after %d steps (worst %.3g)", len(active), r,
                        GAP_TOLERANCE, MAX_STEPS, float(gap.max()))
            break
        sub, xa, za = lik[active], x[active], z[active]
        scaled = sub / (sub @ xa[..., None])  # a_j (A, J, K + 1)
        grad = 1.0 - scaled.mean(-2)
        hess = scaled.transpose(-1, -2) @ scaled / sub.shape[-2]
        target = CENTERING * (xa * za).mean(-1, keepdim=True)
        dx = torch.linalg.solve(hess + torch.diag_embed(za / xa), target / xa - grad)
        dz = (target - xa * za - za * dx) / xa
        step = torch.minimum(_to_boundary(xa, dx), _to_boundary(za, dz))[:, None]
        x[active], z[active] = xa + step * dx, za + step * dz
        pi[active] = x[active] / x[active].sum(-1, keepdim=True)
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


def _posterior_rows(d: Tensor, v: Tensor) -> Tensor:
    """Posterior means ``(R, J)`` of float64 effects ``d`` and variances ``v`` ``(R, J)``, one fitted prior per row.

    The scale grid is each row's whole range; the weights are fitted on :func:`fit_columns` of the row. Rows are
    independent: they are taken in blocks of about :data:`POSTERIOR_ENTRIES` (row, effect, scale) terms.
    """
    step = max(1, POSTERIOR_ENTRIES // (d.shape[-1] * (N_SCALES + 1)))
    return torch.cat([_posterior_block(d[i:i + step], v[i:i + step]) for i in range(0, len(d), step)])


def _posterior_block(d: Tensor, v: Tensor) -> Tensor:
    """:func:`_posterior_rows` of one block of rows."""
    v = v.clamp_min(1e-12)
    scales = scale_grid(d, v)
    logp = _log_marginal(d, v, scales)
    cols = fit_columns(d.shape[-1])
    fit = logp if cols is None else logp[:, cols]
    pi = fit_weights((fit - fit.amax(-1, keepdim=True)).exp())  # rows rescaled: the same fit
    weights = (logp + pi.clamp_min(1e-300).log()[:, None, :]).softmax(-1)
    shrink = scales.square()[:, None, :] / (scales.square()[:, None, :] + v[..., None])
    return (weights * shrink).sum(-1) * d


def ash_posterior_mean(delta: Tensor, var: Tensor) -> Tensor:
    """Posterior means (same shape and dtype as ``delta``) under the fitted mixture prior (module docstring).

    Parameters
    ----------
    delta : Tensor
        Measured effects, any shape (e.g. ``(singles, genes)``, log1p units).
    var : Tensor
        Their squared standard errors, same shape, ≥ 0 (a zero is treated as 1e-12: the effect is kept).

    """
    if delta.shape != var.shape:
        raise ValueError(f"delta {tuple(delta.shape)} and var {tuple(var.shape)} must have the same shape")
    if delta.numel() == 0:
        return delta.clone()
    post = _posterior_rows(delta.double().reshape(1, -1), var.double().reshape(1, -1))
    return post.reshape(delta.shape).to(delta.dtype)


def ash_by_row(delta: Tensor, var: Tensor) -> Tensor:
    """:func:`ash_posterior_mean` with one prior per row: ``delta``, ``var`` ``(R, G)`` → ``(R, G)``.

    The rows are fitted together (batched interior-point steps), each to :data:`GAP_TOLERANCE`.
    """
    if delta.shape != var.shape or delta.ndim != 2:
        raise ValueError(f"delta {tuple(delta.shape)} and var {tuple(var.shape)} must be one (rows, genes) shape")
    if delta.numel() == 0:
        return delta.clone()
    return _posterior_rows(delta.double(), var.double()).to(delta.dtype)
