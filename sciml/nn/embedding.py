"""Shared input encoders for atomistic graphs: element embedding and edge-length features."""

from __future__ import annotations

import torch
from torch import nn

from sciml import keys
from sciml.data.neighbors import edge_vectors
from sciml.nn.radial import GaussianBasis

MAX_Z = 103  # elements H..Lr


class AtomGraphEncoder(nn.Module):
    """Embed atoms by element and edges by their periodic length.

    Parameters
    ----------
    dim : int
        Width of the atom embedding.
    edge_dim : int
        Width of the edge feature.
    cutoff : float
        Largest neighbour distance, Å (last centre of the radial basis).
    n_rbf : int
        Number of Gaussian radial basis functions.

    Notes
    -----
    Edge vectors are recomputed from positions, cell and image shifts, so gradients flow to ``pos`` and
    ``cell``; only the length ``|r_ij|`` enters, which makes the features invariant to rotation,
    translation and atom order.
    """

    def __init__(self, dim: int, edge_dim: int, cutoff: float, n_rbf: int) -> None:
        super().__init__()
        self.element = nn.Embedding(MAX_Z + 1, dim)
        self.rbf = GaussianBasis(0.0, cutoff, n_rbf)
        self.edge = nn.Sequential(nn.Linear(n_rbf, edge_dim), nn.SiLU(), nn.Linear(edge_dim, edge_dim))

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Return atom features ``(n_atoms, dim)`` and edge features ``(n_edges, edge_dim)``."""
        vec = edge_vectors(batch[keys.POS], batch[keys.CELL], batch[keys.EDGE_INDEX], batch[keys.EDGE_SHIFT],
                           batch[keys.BATCH])
        length = torch.linalg.vector_norm(vec, dim=-1)
        return self.element(batch[keys.ATOMIC_NUMBERS]), self.edge(self.rbf(length))
