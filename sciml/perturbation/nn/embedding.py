"""Embeddings of the PAD-Transformer: time, expression values and perturbations."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from sciml.perturbation.nn.graph import propagate, row_normalised


class TimeEmbedding(nn.Module):
    """Sinusoidal features of ``1000·t`` (Vaswani et al. 2017) followed by an MLP; ``(B,) → (B, dim)``."""

    def __init__(self, dim: int, n_freq: int = 32) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.exp(-math.log(1e4) * torch.arange(n_freq) / n_freq), persistent=False)
        self.mlp = nn.Sequential(nn.Linear(2 * n_freq, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: Tensor) -> Tensor:
        arg = 1000.0 * t[:, None] * self.freqs
        return self.mlp(torch.cat([arg.sin(), arg.cos()], -1))


class ValueEncoder(nn.Module):
    """Per-gene value encoder ``(B, G, k) → (B, G, dim)``: an MLP on the ``k`` scalar channels of a token."""

    def __init__(self, dim: int, channels: int = 1) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(channels, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x)


class PerturbationEmbedding(nn.Module):
    r"""Embedding of a set of perturbed genes from the shared gene vocabulary.

    Each gene ``g`` gets ``e_g = I_g + W\,(\hat A^{k} E)_g``: a gene-identity embedding ``I`` (learned only
    for genes perturbed in training) plus the gene-token table ``E`` propagated ``k`` hops over the gene
    graph, so a gene never perturbed in training (but in the vocabulary) still has an embedding built from
    its neighbours'. A set ``{a, b}`` is embedded by ``ρ(φ(e_a) + φ(e_b))`` (Deep Sets, Zaheer et al. 2017),
    which can represent non-additive pairs; the empty set (control) maps to ``ρ(0)``.

    Parameters
    ----------
    n_genes : int
        Vocabulary size ``V``.
    dim : int
        Embedding width.
    hops : int
        Propagation hops ``k``.

    """

    def __init__(self, n_genes: int, dim: int, hops: int = 2) -> None:
        super().__init__()
        self.identity = nn.Embedding(n_genes, dim)
        nn.init.normal_(self.identity.weight, std=0.02)
        self.graph_proj = nn.Linear(dim, dim)
        self.phi = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.rho = nn.Sequential(nn.SiLU(), nn.Linear(dim, dim))
        self.hops = hops
        self._vectors: tuple | None = None  # (key, gene vectors) kept for prediction (gene_vectors)
        self._graph: tuple | None = None  # (key, sparse row-normalised adjacency) (_normalised)

    def gene_vectors(self, gene_table: Tensor, adjacency: Tensor) -> Tensor:
        """``e_g`` for every gene, ``(V, dim)``.

        Without gradients (prediction) the table is kept until a tensor it reads changes (its version or storage):
        propagating over a wide panel's ``(V, V)`` graph costs more than the rest of a condition's embedding.
        """
        if torch.is_grad_enabled():
            return self._gene_vectors(gene_table, adjacency)
        key = _state_key(gene_table, adjacency, *self.parameters())
        if self._vectors is None or self._vectors[0] != key:
            self._vectors = (key, self._gene_vectors(gene_table, adjacency))
        return self._vectors[1]

    def _gene_vectors(self, gene_table: Tensor, adjacency: Tensor) -> Tensor:
        return self.identity.weight + self.graph_proj(propagate(gene_table, self._normalised(adjacency), self.hops))

    def _normalised(self, adjacency: Tensor) -> Tensor:
        """:func:`row_normalised` of ``adjacency``, kept until it changes (its scan is ``O(V²)``, a step's is not)."""
        if adjacency.numel() == 0:
            return adjacency
        key = _state_key(adjacency)
        if self._graph is None or self._graph[0] != key:
            self._graph = (key, row_normalised(adjacency))
        return self._graph[1]

    def forward(self, pert: Tensor, gene_table: Tensor, adjacency: Tensor) -> Tensor:
        """Embed ``pert`` ``(B, P)`` gene indices (−1 = padding) → ``(B, dim)``."""
        vectors = self.gene_vectors(gene_table, adjacency)
        valid = pert >= 0
        e = self.phi(vectors[pert.clamp_min(0)]) * valid[..., None]
        return self.rho(e.sum(1))


def _state_key(*tensors: Tensor) -> tuple:
    """What changes when one of ``tensors`` is replaced or changed in place (storage, version, shape, device)."""
    return tuple((t.data_ptr(), t._version, tuple(t.shape), t.device) for t in tensors)
