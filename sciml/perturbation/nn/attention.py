r"""Differential attention (Ye et al. 2024, "Differential Transformer", arXiv:2410.05258).

Each head splits its queries and keys into two halves and subtracts two softmax maps,

.. math::

    A = \operatorname{softmax}\!\Big(\frac{Q_1K_1^\top}{\sqrt d}\Big)
        - \lambda\,\operatorname{softmax}\!\Big(\frac{Q_2K_2^\top}{\sqrt d}\Big),\qquad
    \lambda = e^{\lambda_{q1}\cdot\lambda_{k1}} - e^{\lambda_{q2}\cdot\lambda_{k2}} + \lambda_{\text{init}},

with ``λ_init = 0.8 − 0.6·exp(−0.3·depth)``; the head output ``A V`` goes through a per-head RMSNorm and is
scaled by ``1 − λ_init`` (Eq. 1–3 of the paper). Common-mode attention noise cancels in the difference.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def lambda_init(depth: int) -> float:
    """``λ_init = 0.8 − 0.6·exp(−0.3·depth)`` for the block at ``depth`` (0-based)."""
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def masked_softmax_scores(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """``softmax(q kᵀ/√d)`` over keys, ``(..., Lq, d) × (..., Lk, d) → (..., Lq, Lk)``.

    ``mask`` is bool ``(Lq, Lk)``; ``False`` entries get zero weight (each query row must allow ≥ 1 key).
    """
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    return logits.softmax(-1)


class DifferentialAttention(nn.Module):
    """Multi-head differential attention; self-attention when ``context`` is omitted.

    Parameters
    ----------
    dim : int
        Model width ``d_model``; ``dim`` must be divisible by ``2·heads``.
    heads : int
        Number of heads; each uses query/key halves of width ``dim / (2·heads)`` and values of width
        ``dim / heads``.
    depth : int
        Block index, sets ``λ_init``.

    """

    def __init__(self, dim: int, heads: int = 4, depth: int = 0) -> None:
        super().__init__()
        if dim % (2 * heads):
            raise ValueError(f"dim={dim} must be divisible by 2*heads={2 * heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.out = nn.Linear(dim, dim, bias=False)
        half = self.head_dim // 2
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(half) * 0.1) for _ in range(4))
        self.lambda_init = lambda_init(depth)
        self.norm = nn.RMSNorm(self.head_dim, elementwise_affine=False)

    def lam(self) -> Tensor:
        """Scalar ``λ = exp(λq1·λk1) − exp(λq2·λk2) + λ_init``."""
        return (torch.exp(self.lambda_q1 @ self.lambda_k1) - torch.exp(self.lambda_q2 @ self.lambda_k2)
                + self.lambda_init)

    def _split(self, x: Tensor, n_parts: int) -> Tensor:
        """``(B, L, dim) → (B, heads·n_parts, L, dim/(heads·n_parts))`` grouped per head."""
        b, length, _ = x.shape
        return x.view(b, length, self.heads * n_parts, -1).transpose(1, 2)

    def keys_values(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys ``(B, heads, 2, Lk, d/2)`` and values ``(B, heads, Lk, d)`` of ``context`` ``(B, Lk, dim)``.

        Cross-attention to a context that does not change across ODE steps computes them once.
        """
        return self._split(self.k(context), 2).unflatten(1, (self.heads, 2)), self._split(self.v(context), 1)

    def attention_map(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None,
                      keys: Tensor | None = None) -> Tensor:
        """Differential map ``A``, shape ``(B, heads, Lq, Lk)`` (rows sum to ``1 − λ``)."""
        ctx = x if context is None else context
        q = self._split(self.q(x), 2).unflatten(1, (self.heads, 2))
        k = self._split(self.k(ctx), 2).unflatten(1, (self.heads, 2)) if keys is None else keys
        a1 = masked_softmax_scores(q[:, :, 0], k[:, :, 0], mask)
        a2 = masked_softmax_scores(q[:, :, 1], k[:, :, 1], mask)
        return a1 - self.lam() * a2

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None,
                kv: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """Attend from ``x`` ``(B, Lq, dim)`` to ``context`` ``(B, Lk, dim)`` (default ``x``); ``(B, Lq, dim)``.

        ``mask``: optional bool ``(Lq, Lk)``, ``True`` where a query may attend to a key. ``kv``: the context's
        :meth:`keys_values`, precomputed (then ``context`` is not used).
        """
        ctx = x if context is None else context
        a = self.attention_map(x, context, mask, None if kv is None else kv[0])
        v = self._split(self.v(ctx), 1) if kv is None else kv[1]
        heads = self.norm(a @ v) * (1.0 - self.lambda_init)
        return self.out(heads.transpose(1, 2).flatten(2))
