"""Graph attention block (Matformer-style gated attention with edge features)."""

from __future__ import annotations

import math

import torch
from torch import nn


class GraphAttentionBlock(nn.Module):
    """One Matformer-style layer (Yan et al., NeurIPS 2022, Eq. 4–6), channel-wise gated attention.

    For an edge ``j → i`` with edge feature ``e_ij``:

    - ``α_ij = (W_q h_i) ⊙ (W_k h_j + W_e e_ij) / √d`` (per channel),
    - ``m_ij = σ(LN(α_ij)) ⊙ (W_v h_j + W_u e_ij)``,
    - ``h_i ← h_i + SiLU(BN(W_o Σ_j m_ij))``.

    The sigmoid gate (instead of a softmax over neighbours) keeps the sum aggregation, so the layer still
    sees how many neighbours an atom has, as CGCNN does.

    Parameters
    ----------
    dim : int
        Atom feature width.
    edge_dim : int
        Edge feature width.
    heads : int
        Kept for configuration compatibility; the gate is per channel (``dim`` "heads" of width 1).
    """

    def __init__(self, dim: int, edge_dim: int, heads: int = 1) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(dim, dim) for _ in range(3))
        self.edge_key, self.edge_value = nn.Linear(edge_dim, dim), nn.Linear(edge_dim, dim)
        self.gate_norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.BatchNorm1d(dim)
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """Update ``h`` (n_atoms, dim); ``edge_index`` is [centre i, neighbour j], messages flow to the centre."""
        i, j = edge_index
        alpha = self.query(h)[i] * (self.key(h)[j] + self.edge_key(edge_attr)) * self.scale
        message = torch.sigmoid(self.gate_norm(alpha)) * (self.value(h)[j] + self.edge_value(edge_attr))
        aggregated = torch.zeros_like(h).index_add_(0, i, message)
        return h + nn.functional.silu(self.norm(self.out(aggregated)))
