"""Shared input encoders for atomistic graphs: element embedding and edge-length features."""

from __future__ import annotations

import torch
from torch import nn

from sciml.core import keys
from sciml.core.elements import MAX_Z, element_table
from sciml.core.neighbors import edge_vectors
from sciml.core.radial import GaussianBasis


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
    Atoms are embedded as ``W t_Z + e_Z``: a linear map of a descriptor table ``t_Z`` (electronegativity,
    radii, row, group, ...; stored as a buffer so it travels with the weights) plus a learned per-element
    vector, so rare elements start from physically meaningful features. After :meth:`restrict_to`, elements
    outside the training vocabulary get the descriptor part only (their learned vector was never trained):
    the documented fallback for predicting on unseen elements.
    Edge vectors are recomputed from positions, cell and image shifts, so gradients flow to ``pos`` and
    ``cell``; only the length ``|r_ij|`` enters, which makes the features invariant to rotation,
    translation and atom order.

    """

    def __init__(self, dim: int, edge_dim: int, cutoff: float, n_rbf: int) -> None:
        super().__init__()
        self.register_buffer("table", torch.as_tensor(element_table(), dtype=torch.get_default_dtype()))
        self.descriptor = nn.Linear(self.table.shape[1], dim)
        self.element = nn.Embedding(MAX_Z + 1, dim)
        nn.init.normal_(self.element.weight, std=0.1)
        self.register_buffer("seen", torch.ones(MAX_Z + 1), persistent=False)  # derived from the vocabulary
        self.rbf = GaussianBasis(0.0, cutoff, n_rbf)
        self.edge = nn.Sequential(nn.Linear(n_rbf, edge_dim), nn.SiLU(), nn.Linear(edge_dim, edge_dim))

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Return atom features ``(n_atoms, dim)`` and edge features ``(n_edges, edge_dim)``."""
        vec = edge_vectors(batch[keys.POS], batch[keys.CELL], batch[keys.EDGE_INDEX], batch[keys.EDGE_SHIFT],
                           batch[keys.BATCH])
        length = torch.linalg.vector_norm(vec, dim=-1)
        z = batch[keys.ATOMIC_NUMBERS]
        atoms = self.descriptor(self.table[z].to(length.dtype)) + self.element(z) * self.seen[z].unsqueeze(-1)
        return atoms, self.edge(self.rbf(length))

    def restrict_to(self, atomic_numbers: list[int]) -> None:
        """Use the learned per-element vectors only for ``atomic_numbers`` (the training vocabulary)."""
        self.seen.zero_()
        self.seen[torch.as_tensor(atomic_numbers, dtype=torch.long)] = 1.0
