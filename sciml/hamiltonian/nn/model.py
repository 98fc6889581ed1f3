"""HamiltonianNet: an E(3)-equivariant attention network predicting Hamiltonian blocks as irreps.

Atoms carry features ``h_i`` and directed edges ``i ← j`` carry features ``e_ij``, both of the hidden irreps.
Inputs (NextHAM's zeroth-step descriptor): the H0 on-site block of each atom and the H0 off-site block of
each edge, already decomposed into irreps by :class:`~sciml.hamiltonian.nn.blocks.BlockBasis` and normalised,
plus one-hot element (pair) types, the distance |r_ij| (Gaussian basis) and the direction ``Y(r̂_ij)``.
Each layer (SE(3)-Transformer / Equiformer-lite):

    m_ij = Conv([h_j, e_ij] ⊗ Y(r̂_ij); φ_ij),      α_ij = σ(MLP(s_i, s_j, φ_ij))
    h_i ← h_i + GatedLinear([h_i, Σ_j α_ij m_ij])
    e_ij ← e_ij + GatedLinear([e_ij, h_i + h_j, m_ij])

with ``φ_ij`` = radial basis × cosine envelope and the scalar channels of ``e_ij``. The edge's own features
enter the tensor product with its direction: the block ``H0_ij`` coupled to ``Y(r̂_ij)`` is what carries the
cross-``L`` part of the correction (a linear map in a fixed frame). Read-outs are linear:
on-site irreps from ``[h_i, x_i^H0]``, off-site irreps from ``[e_ij, h_i + h_j, x_ij^H0]`` (the H0 skip makes
``ΔH ≈ linear(H0)`` the starting point). Blocks are assembled and symmetrised by
:func:`sciml.hamiltonian.loss.assemble`.
With ``use_h0=False`` the H0 inputs are dropped (ablation): the network sees elements and geometry only.
"""

from __future__ import annotations

import torch
from torch import nn

from sciml.core.e3nn_o3 import o3
from sciml.core.radial import CosineCutoff, GaussianBasis
from sciml.hamiltonian.nn.layers import Attention, EdgeConvolution, GatedLinear


class InteractionLayer(nn.Module):
    """One attention/message-passing layer updating node and edge features (see module docstring)."""

    def __init__(self, hidden: o3.Irreps, irreps_sh: o3.Irreps, n_rbf: int, n_scalars: int, radial_hidden: int):
        super().__init__()
        n_inv = n_rbf + n_scalars
        self.conv = EdgeConvolution(hidden + hidden, irreps_sh, hidden, n_inv, radial_hidden)
        self.attention = Attention(n_scalars, n_inv)
        self.node_update = GatedLinear(hidden + hidden, hidden)
        self.edge_update = GatedLinear(hidden + hidden + hidden, hidden)
        self.n_scalars = n_scalars

    def forward(self, h, e, sh, rbf, edge_index):
        i, j = edge_index
        inv = torch.cat([rbf, e[:, : self.n_scalars]], dim=-1)
        m = self.conv(torch.cat([h[j], e], dim=-1), sh, inv)
        alpha = self.attention(h[:, : self.n_scalars], inv, edge_index)
        agg = torch.zeros_like(h).index_add_(0, i, alpha * m)
        h = h + self.node_update(torch.cat([h, agg], dim=-1))
        e = e + self.edge_update(torch.cat([e, h[i] + h[j], m], dim=-1))
        return h, e


class HamiltonianNet(nn.Module):
    """Equivariant network: graph of atoms → normalised on-site and off-site block irreps.

    Parameters
    ----------
    node_irreps, edge_irreps : str
        Irreps of the on-site and off-site blocks (``BlockBasis.irreps`` of the node and edge bases).
    n_node_types, n_edge_types : int
        Number of elements and of ordered element pairs.
    hidden : str
        Hidden irreps of nodes and edges (must contain ``0e``).
    lmax : int
        Degree of the edge spherical harmonics.
    n_layers, n_rbf, cutoff, radial_hidden : int, int, float (Å), int
        Depth, radial basis size, radial cutoff and radial-MLP width.
    use_h0 : bool
        Feed the H0 block irreps (NextHAM's zeroth-step Hamiltonian); ``False`` for the ablation.

    """

    def __init__(self, node_irreps: str, edge_irreps: str, n_node_types: int, n_edge_types: int,
                 hidden: str = "32x0e+16x1o+16x1e+8x2e+8x2o+4x3o+4x3e+4x4e", lmax: int = 4, n_layers: int = 2,
                 n_rbf: int = 16, cutoff: float = 6.0, radial_hidden: int = 64, use_h0: bool = True) -> None:
        super().__init__()
        self.node_irreps, self.edge_irreps = o3.Irreps(node_irreps), o3.Irreps(edge_irreps)
        self.hidden, self.use_h0 = o3.Irreps(hidden), use_h0
        self.irreps_sh = o3.Irreps.spherical_harmonics(lmax)
        n_scalars = sum(m for m, ir in self.hidden if ir.l == 0 and ir.p == 1)
        if n_scalars == 0 or self.hidden[0][1] != o3.Irrep("0e"):
            raise ValueError(f"hidden irreps {hidden!r} must start with scalars 0e")
        self.rbf, self.envelope = GaussianBasis(0.0, cutoff, n_rbf), CosineCutoff(cutoff)
        node_in = o3.Irreps(f"{n_node_types}x0e") + (self.node_irreps if use_h0 else o3.Irreps(""))
        edge_in = o3.Irreps(f"{n_edge_types}x0e + {n_rbf}x0e") + (self.edge_irreps if use_h0 else o3.Irreps(""))
        self.node_embed, self.edge_embed = o3.Linear(node_in, self.hidden), o3.Linear(edge_in, self.hidden)
        self.layers = nn.ModuleList(InteractionLayer(self.hidden, self.irreps_sh, n_rbf, n_scalars, radial_hidden)
                                    for _ in range(n_layers))
        self.node_out = o3.Linear(self.hidden + (self.node_irreps if use_h0 else o3.Irreps("")), self.node_irreps)
        self.edge_out = o3.Linear(self.hidden + self.hidden + (self.edge_irreps if use_h0 else o3.Irreps("")),
                                  self.edge_irreps)
        self.n_node_types, self.n_edge_types = n_node_types, n_edge_types

    def edge_vectors(self, pos, edge_index, shift=None, cell=None, edge_graph=None):
        """``r_ij = x_j + S_e·L − x_i`` (Å), shape ``(E, 3)``; ``S_e`` and ``L`` only for periodic graphs."""
        i, j = edge_index
        vec = pos[j] - pos[i]
        if shift is not None and cell is not None:
            vec = vec + torch.einsum("ek,ekl->el", shift.to(pos), cell[edge_graph])
        return vec

    def forward(self, node_type, edge_type, vec, edge_index, x_node=None, x_edge=None):
        """Normalised block irreps.

        Parameters
        ----------
        node_type : (N,) int64
            Element index of each atom.
        edge_type : (E,) int64
            Ordered element-pair index of each edge.
        vec : (E, 3) float
            Edge vectors ``r_ij`` (Å).
        edge_index : (2, E) int64
            ``[i, j]`` (the block of edge ``e`` is ``H_ij``).
        x_node : (N, node_irreps.dim)
            Normalised H0 on-site irreps (ignored when ``use_h0`` is False).
        x_edge : (E, edge_irreps.dim)
            Normalised H0 off-site irreps (ignored when ``use_h0`` is False).

        Returns
        -------
        (N, node_irreps.dim), (E, edge_irreps.dim)

        """
        dist = vec.norm(dim=-1)
        sh = o3.spherical_harmonics(self.irreps_sh, vec, normalize=True, normalization="component")
        rbf = self.rbf(dist) * self.envelope(dist).unsqueeze(-1)
        onehot_n = nn.functional.one_hot(node_type, self.n_node_types).to(vec.dtype)
        onehot_e = nn.functional.one_hot(edge_type, self.n_edge_types).to(vec.dtype)
        node_in, edge_in = [onehot_n], [onehot_e, rbf]
        if self.use_h0:
            node_in.append(x_node)
            edge_in.append(x_edge)
        h, e = self.node_embed(torch.cat(node_in, -1)), self.edge_embed(torch.cat(edge_in, -1))
        for layer in self.layers:
            h, e = layer(h, e, sh, rbf, edge_index)
        i, j = edge_index
        node_feats, edge_feats = [h], [e, h[i] + h[j]]
        if self.use_h0:
            node_feats.append(x_node)
            edge_feats.append(x_edge)
        return self.node_out(torch.cat(node_feats, -1)), self.edge_out(torch.cat(edge_feats, -1))
