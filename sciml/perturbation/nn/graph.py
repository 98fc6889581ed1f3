"""Gene-graph helpers: attention masks from edge lists and graph propagation of gene embeddings.

The graph (``(2, E)`` gene index pairs, e.g. the co-expression kNN graph of the data module, or a given
regulatory graph) is used twice: as an attention mask so a gene token attends to its neighbours only, and
to propagate gene embeddings so a gene never perturbed in training still gets a perturbation embedding from
its neighbours (``e_g = Â^k E``, ``Â`` the row-normalised adjacency with self loops, as in SGC, Wu et al. 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

SPARSE_SHARE = 0.25  # a mask becomes an EdgeMask when at most this share of (query, key) pairs is allowed


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


@dataclass(frozen=True)
class EdgeMask:
    """A sparse attention mask: its allowed (query, key) pairs, ordered by query (compressed sparse rows).

    Attributes
    ----------
    query, key : Tensor
        ``(E,)`` int64 query and key index of each allowed pair, sorted by query.
    counts : Tensor
        ``(Lq,)`` int64 allowed keys per query (each ≥ 1).
    flat : Tensor
        ``(E,)`` int64 position ``query·Lk + key`` of each pair in the flattened ``(Lq, Lk)`` map.
    shape : tuple of int
        ``(Lq, Lk)``.

    """

    query: Tensor
    key: Tensor
    counts: Tensor
    flat: Tensor
    shape: tuple[int, int]

    @classmethod
    def from_dense(cls, mask: Tensor) -> EdgeMask:
        """The allowed pairs of a bool mask ``(Lq, Lk)``; every query must allow at least one key."""
        counts = mask.sum(-1)
        if bool((counts == 0).any()):
            raise ValueError("every query of an attention mask must allow at least one key")
        query, key = mask.nonzero(as_tuple=True)  # row-major: sorted by query
        return cls(query, key, counts, query * mask.shape[-1] + key, tuple(mask.shape))

    def scatter(self, values: Tensor) -> Tensor:
        """Dense maps ``(..., Lq, Lk)`` holding ``values`` ``(..., E)`` at the allowed pairs and 0 elsewhere."""
        dense = values.new_zeros(*values.shape[:-1], self.shape[0] * self.shape[1])
        return dense.index_copy(-1, self.flat, values).unflatten(-1, self.shape)

    def to_dense(self) -> Tensor:
        """The bool mask ``(Lq, Lk)``."""
        return self.scatter(torch.ones(len(self.flat), dtype=torch.bool, device=self.flat.device))


def compact_mask(mask: Tensor | None) -> Tensor | EdgeMask | None:
    """``mask`` as an :class:`EdgeMask` when at most :data:`SPARSE_SHARE` of its pairs are allowed, else as is.

    A gene graph with ~15 neighbours per gene allows a few percent of the pairs of a 256-gene chunk: the softmax
    then runs over the allowed pairs only (:func:`~sciml.perturbation.nn.attention.edge_softmax_scores`).
    """
    if mask is None or int(mask.sum()) > SPARSE_SHARE * mask.numel():
        return mask
    return EdgeMask.from_dense(mask)


def row_normalised(adjacency: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """``Â = D⁻¹A`` of a bool adjacency ``(V, V)`` (self loops in ``A``) as a sparse COO matrix of its ``E`` edges."""
    rows, cols = adjacency.nonzero(as_tuple=True)  # row-major: already coalesced
    degree = adjacency.sum(-1).clamp_min(1).to(dtype)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), degree.reciprocal()[rows], tuple(adjacency.shape),
                                   is_coalesced=True, check_invariants=False)


def propagate(x: Tensor, adjacency: Tensor, hops: int) -> Tensor:
    """``Â^hops x`` with ``Â = D⁻¹A`` (row-normalised, self loops in ``A``); ``x`` ``(V, d)`` → ``(V, d)``.

    ``adjacency``: the bool ``A`` ``(V, V)`` or :func:`row_normalised` of it (sparse, kept by a caller that
    propagates often). ``Â`` is applied sparse: ``O(E·d)`` per hop, not ``O(V²·d)``.
    """
    if adjacency.numel() == 0 or hops == 0:
        return x
    a = adjacency if adjacency.is_sparse else row_normalised(adjacency, x.dtype)
    a = a.to(x.dtype)
    for _ in range(hops):
        x = torch.sparse.mm(a, x)
    return x
