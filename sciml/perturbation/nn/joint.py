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


def interaction_variance(d: Tensor, v: Tensor, pairs: Tensor, dab: Tensor, vab: Tensor) -> Tensor:
    """Moment estimate ``τ²`` ``(G,)`` of the interaction variance per gene (module docstring); 0 without doubles."""
    if len(pairs) == 0:
        return torch.zeros_like(d[0])
    a, b = pairs[:, 0], pairs[:, 1]
    return ((dab - d[a] - d[b]).square() - vab - v[a] - v[b]).mean(0).clamp_min(0.0)


def joint_singles(d: Tensor, v: Tensor, pairs: Tensor, dab: Tensor, vab: Tensor) -> tuple[Tensor, Tensor]:
    """GLS singles and their variances ``(S, G)`` (module docstring).

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
    s = d.shape[0]
    if pairs.ndim != 2 or pairs.shape[-1] != 2 or dab.shape != (len(pairs), d.shape[1]) or vab.shape != dab.shape:
        raise ValueError(f"pairs {tuple(pairs.shape)} must be (P, 2) and the doubles {tuple(dab.shape)}, "
                         f"{tuple(vab.shape)} (P, {d.shape[1]})")
    d64, v64, dab64, vab64 = (t.double() for t in (d, v, dab, vab))
    tau2 = interaction_variance(d64, v64, pairs, dab64, vab64)
    design = torch.cat([torch.eye(s, dtype=torch.float64),
                        torch.nn.functional.one_hot(pairs, s).sum(1).double()])  # (S + P, S)
    w = 1.0 / torch.cat([v64, vab64 + tau2]).clamp_min(1e-12)  # (S + P, G)
    normal = torch.einsum("ns,ng,nt->gst", design, w, design)  # (G, S, S)
    cov = torch.linalg.inv(normal)
    rhs = design.T @ (w * torch.cat([d64, dab64]))  # (S, G)
    beta = torch.einsum("gst,tg->sg", cov, rhs)
    return beta.to(d.dtype), torch.diagonal(cov, dim1=-2, dim2=-1).T.to(d.dtype)
