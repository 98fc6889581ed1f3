"""Graph attention block (Matformer-style message passing with edge-aware attention)."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import TransformerConv


class GraphAttentionBlock(nn.Module):
    """One post-norm transformer layer on the atom graph.

    ``h_i ← LN(h_i + Σ_j α_ij (W_v h_j + W_e e_ij))``, with
    ``α_ij = softmax_j((W_q h_i)·(W_k h_j + W_e e_ij)/√d)`` (Shi et al. 2021, as used by Matformer,
    Yan et al. 2022), followed by ``h ← LN(h + FFN(h))``.

    Parameters
    ----------
    dim : int
        Atom feature width (divisible by ``heads``).
    edge_dim : int
        Edge feature width.
    heads : int
        Number of attention heads.

    """

    def __init__(self, dim: int, edge_dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.attn = TransformerConv(dim, dim // heads, heads=heads, edge_dim=edge_dim, root_weight=True)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """Update ``h`` (n_atoms, dim); ``edge_index`` is [centre, neighbour], messages flow to the centre."""
        h = self.norm1(h + self.attn(h, edge_index.flip(0), edge_attr))
        return self.norm2(h + self.ffn(h))
