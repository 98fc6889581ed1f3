r"""Nearest cell population with a given mean: what the additive fallback generates around its prior mean.

For one gene (a column ``y`` of ``N`` generated cells) and a target mean ``m``, the Euclidean projection of ``y``
onto ``{x : x ≥ 0, mean(x) = m}`` (a scaled simplex) is ``x = max(y − τ, 0)`` with the unique ``τ`` for which
``mean(x) = m`` (Duchi et al. 2008, Fig. 1: sort, cumulative sum, threshold). A negative ``m`` cannot be reached by
non-negative cells and is replaced by 0 (every cell 0), the non-negative mean closest to it. Without the
non-negativity constraint the projection is the shift ``x = y − mean(y) + m``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def project_mean(cells: Tensor, mean: Tensor, nonnegative: bool = True) -> Tensor:
    """Cells closest to ``cells`` in L2 whose per-gene mean over cells is exactly ``mean`` (clipped at 0).

    Parameters
    ----------
    cells : Tensor
        ``(..., N, G)`` generated cells (log1p expression).
    mean : Tensor
        ``(..., G)`` target mean per gene; broadcast against ``cells.shape[:-2]``.
    nonnegative : bool
        Project onto ``x ≥ 0`` with that mean (target ``max(mean, 0)``); ``False``: shift each gene.

    Returns
    -------
    Tensor
        ``(..., N, G)`` in the dtype of ``cells``; computed in float64, so the mean matches to ~1e-7 in float32.

    """
    y = cells.double()
    m = torch.broadcast_to(mean.double(), y.shape[:-2] + y.shape[-1:])
    if not nonnegative:
        return (y - y.mean(-2, keepdim=True) + m.unsqueeze(-2)).to(cells.dtype)
    n = y.shape[-2]
    total = n * m.clamp_min(0.0)  # (..., G) target column sums
    u = y.sort(-2, descending=True).values
    css = u.cumsum(-2)
    j = torch.arange(1, n + 1, dtype=y.dtype, device=y.device).view(*([1] * (y.dim() - 2)), n, 1)
    # the condition holds on a prefix of the sorted cells; rho = its length
    rho = (u - (css - total.unsqueeze(-2)) / j > 0).sum(-2, keepdim=True).clamp_min(1)
    tau = (css.gather(-2, rho - 1) - total.unsqueeze(-2)) / rho.to(y.dtype)
    x = (y - tau).clamp_min(0.0)
    return torch.where(total.unsqueeze(-2) > 0, x, torch.zeros_like(x)).to(cells.dtype)
