r"""Invariant structure embedding for the applicability-domain test: pooled ``l = 0`` irreps of H0.

The model's input is H0 (block irreps, :class:`~sciml.hamiltonian.nn.blocks.BlockBasis`); its scalar (``0e``)
components are invariant under rotations and translations (``D^0 = 1``), and the closed-form ridge that does
most of the work is a function of them and of the geometry they encode. Per structure, for every on-site pair
type ``(z, z)`` and every off-site pair type ``(z_i, z_j)`` the ``0e`` channels that type uses are pooled over
the atoms (directed pairs) of that type by their mean and population standard deviation, and the atom count of
each element is appended:

.. math::  e(x) = \big[\, \overline{h}^{0e}_{t}, \ \mathrm{sd}(h^{0e}_{t}) \ (t \in \text{types}),\ n_z \,\big],

a vector of fixed length for any molecule made of the model's elements, invariant to rotations, translations
and the order of the atoms (means and standard deviations are symmetric functions). A type absent from a
structure contributes zeros. The embedding holds no learned parameter, so it does not depend on training: a
new structure is "in domain" when its H0 resembles those of the training structures (the inputs the ridge and
the network were fitted on). Units: Hartree (irreps), counts (atoms).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sciml.hamiltonian.nn.blocks import BlockBasis

__all__ = ["EMBEDDING", "embedding_dim", "h0_embedding"]

EMBEDDING = "h0_scalars"  # name recorded in domain.json


def _scalar_channels(basis: BlockBasis) -> list[Tensor]:
    """Per pair type: indices of the ``0e`` irreps components the pair uses, int64 ``(c_t,)``."""
    idx, start = [], 0
    for mul, ir in basis.irreps:
        if ir.l == 0 and ir.p == 1:
            idx.extend(range(start, start + mul))
        start += mul * ir.dim
    idx = torch.tensor(idx, dtype=torch.long)
    return [idx[basis.mask(*pair)[idx]] for pair in basis.pairs]


def embedding_dim(node_basis: BlockBasis, edge_basis: BlockBasis) -> int:
    """Length ``d`` of :func:`h0_embedding` for these bases."""
    chans = _scalar_channels(node_basis) + _scalar_channels(edge_basis)
    return 2 * sum(len(c) for c in chans) + len(node_basis.pairs)


def _pool(x: Tensor, types: Tensor, graph: Tensor, n_graphs: int, channels: list[Tensor]) -> Tensor:
    """Mean and population sd of the scalar channels per (graph, type): ``(G, 2 Σ_t c_t)``, and counts ``(G, T)``."""
    parts, counts = [], []
    for t, chan in enumerate(channels):
        sel = types == t
        g = graph[sel]
        v = x[sel][:, chan].double()
        n = torch.zeros(n_graphs, dtype=torch.float64).index_add_(0, g, torch.ones(len(g), dtype=torch.float64))
        s1 = torch.zeros(n_graphs, len(chan), dtype=torch.float64).index_add_(0, g, v)
        mean = s1 / n.clamp_min(1)[:, None]
        dev = v - mean[g]
        var = torch.zeros_like(s1).index_add_(0, g, dev * dev) / n.clamp_min(1)[:, None]
        parts += [mean, var.clamp_min(0).sqrt()]
        counts.append(n)
    return torch.cat(parts, dim=1), torch.stack(counts, dim=1)


def h0_embedding(batch, node_basis: BlockBasis, edge_basis: BlockBasis) -> Tensor:
    """Invariant embedding of each structure of a batch (module docstring).

    Parameters
    ----------
    batch : GraphBatch
        Molecules or crystals with ``x_node (N, Dn)``, ``x_edge (E, De)`` (H0 irreps, Hartree), ``node_type``,
        ``edge_type``, ``edge_index`` and ``batch`` (graph of each atom).
    node_basis, edge_basis : BlockBasis
        The model's on-site and off-site bases (the type ids of the batch index their ``pairs``).

    Returns
    -------
    torch.Tensor
        ``(G, d)`` float64, ``d = embedding_dim(node_basis, edge_basis)``.

    """
    n_graphs = int(batch.batch.max()) + 1 if batch.batch.numel() else 0
    nodes, counts = _pool(batch.x_node, batch.node_type, batch.batch, n_graphs, _scalar_channels(node_basis))
    edges, _ = _pool(batch.x_edge, batch.edge_type, batch.batch[batch.edge_index[0]], n_graphs,
                     _scalar_channels(edge_basis))
    return torch.cat([nodes, edges, counts], dim=1)
