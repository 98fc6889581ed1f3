"""Gene-graph helpers: attention masks from edge lists and graph propagation of gene embeddings.

The graph (``(2, E)`` gene index pairs, e.g. the co-expression kNN graph of the data module, or a given
regulatory graph) is used twice: as an attention mask so a gene token attends to its neighbours only, and
to propagate gene embeddings so a gene never perturbed in training still gets a perturbation embedding from
its neighbours (``e_g = Â^k E``, ``Â`` the row-normalised adjacency with self loops, as in SGC, Wu et al. 2019).
"""

from __future__ import annotations

import torch
from torch import Tensor


def adjacency_from_edges(edge_index: Tensor, n_genes: int) -> Tensor:
    """Symmetric bool adjacency ``(n_genes, n_genes)`` with self loops from ``edge_index`` ``(2, E)``.

    Raises
    ------
    ValueError
        If ``edge_index`` is not ``(2, E)`` integers in ``[0, n_genes)``.

    """
    edge_index = torch.as_tensor(edge_index)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
        raise ValueError(f"gene graph must be an integer tensor (2, E), got {tuple(edge_index.shape)}")
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n_genes):
        raise ValueError(f"gene graph indices must lie in [0, {n_genes})")
    adj = torch.eye(n_genes, dtype=torch.bool)
    adj[edge_index[0], edge_index[1]] = True
    return adj | adj.T


def submask(adjacency: Tensor, genes: Tensor) -> Tensor | None:
    """Attention mask of the genes ``genes`` ``(G,)``: ``adjacency[genes][:, genes]``; ``None`` without a graph."""
    if adjacency.numel() == 0:
        return None
    return adjacency[genes][:, genes]


def propagate(x: Tensor, adjacency: Tensor, hops: int) -> Tensor:
    """``Â^hops x`` with ``Â = D⁻¹A`` (row-normalised, self loops in ``A``); ``x`` ``(V, d)`` → ``(V, d)``."""
    if adjacency.numel() == 0 or hops == 0:
        return x
    a = adjacency.to(x.dtype)
    a = a / a.sum(-1, keepdim=True).clamp_min(1.0)
    for _ in range(hops):
        x = a @ x
    return x
