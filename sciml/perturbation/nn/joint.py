r"""Single effects estimated jointly from the measured singles and the training doubles (``flow.denoise: eb_joint``).

Every double ``a+b`` also measures its singles: ``Δ_ab = β_a + β_b + ε_ab + noise``, with ``ε_ab`` the interaction.
Per gene ``g`` the singles ``β`` (``S`` of them) are fitted by generalised least squares on the measured singles
``Δ_a`` (variance ``v_a``) and the doubles (variance ``v_ab + τ_g²``), where ``τ_g²``, the variance of the
interactions on gene ``g``, is estimated by moments from the residuals ``r_ab = Δ_ab − Δ_a − Δ_b``:

    τ_g² = max(0, mean_ab(r_ab² − v_ab − v_a − v_b))          (DerSimonian & Laird 1986, *Control. Clin. Trials* 7:177)

A gene whose doubles interact much lets them count little, and without doubles the estimate is the measured singles.
The estimates and the diagonal of their covariance ``(Xᵀ W_g X)⁻¹`` then go through the per-single shrinkage
(:func:`sciml.perturbation.nn.shrinkage.ash_by_row`). How they compare with the measured singles: docs/benchmarks.md
(``benchmarks/perturbation_joint_singles.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

SYSTEM_ENTRIES = 2**21  # entries of the per-gene (K, K) normal matrices held at once (float64: 16 MB)


def interaction_variance(d: Tensor, v: Tensor, pairs: Tensor, dab: Tensor, vab: Tensor) -> Tensor:
    """Moment estimate ``τ²`` ``(G,)`` of the interaction variance per gene (module docstring); 0 without doubles."""
    if len(pairs) == 0:
        return torch.zeros_like(d[0])
    a, b = pairs[:, 0], pairs[:, 1]
    return ((dab - d[a] - d[b]).square() - vab - v[a] - v[b]).mean(0).clamp_min(0.0)


def joint_singles(d: Tensor, v: Tensor, pairs: Tensor, dab: Tensor, vab: Tensor) -> tuple[Tensor, Tensor]:
    """GLS singles and their variances ``(S, G)`` (module docstring).

    Only the ``K`` singles that are in a double are fitted together (one ``(K, K)`` system per gene, solved for a
    block of genes at a time, :data:`SYSTEM_ENTRIES`); a single in no double keeps its measurement and variance.

    Parameters
    ----------
    d, v : Tensor
        Measured single effects ``(S, G)`` (log1p units) and their squared standard errors (≥ 0; a zero counts as
        1e-12, i.e. the single is kept as measured).
    pairs : Tensor
        int64 ``(P, 2)``: the doubles' singles as row indices of ``d``.
    dab, vab : Tensor
        The doubles' measured effects and squared standard errors ``(P, G)``.

    """
    if pairs.ndim != 2 or pairs.shape[-1] != 2 or dab.shape != (len(pairs), d.shape[1]) or vab.shape != dab.shape:
        raise ValueError(f"pairs {tuple(pairs.shape)} must be (P, 2) and the doubles {tuple(dab.shape)}, "
                         f"{tuple(vab.shape)} (P, {d.shape[1]})")
    d64, v64, dab64, vab64 = (t.double() for t in (d, v, dab, vab))
    beta, var = d64.clone(), v64.clamp_min(1e-12)  # a single in no double: its own measurement (weight 1/v)
    if len(pairs) == 0:
        return beta.to(d.dtype), var.to(d.dtype)
    tau2 = interaction_variance(d64, v64, pairs, dab64, vab64)
    coupled, local = torch.unique(pairs, return_inverse=True)  # only singles in a double are fitted together
    k = len(coupled)
    design = torch.cat([torch.eye(k, dtype=torch.float64),
                        torch.nn.functional.one_hot(local, k).sum(1).double()])  # (K + P, K)
    w = 1.0 / torch.cat([v64[coupled], vab64 + tau2]).clamp_min(1e-12)  # (K + P, G)
    y = torch.cat([d64[coupled], dab64])
    step = max(1, SYSTEM_ENTRIES // (k * k))  # genes whose (K, K) systems are solved at once
    for start in range(0, d.shape[1], step):
        cols = slice(start, start + step)
        cov = torch.linalg.inv(torch.einsum("ns,ng,nt->gst", design, w[:, cols], design))  # (g, K, K)
        rhs = design.T @ (w[:, cols] * y[:, cols])  # (K, g)
        beta[coupled, cols] = torch.einsum("gst,tg->sg", cov, rhs)
        var[coupled, cols] = torch.diagonal(cov, dim1=-2, dim2=-1).T
    return beta.to(d.dtype), var.to(d.dtype)
