"""PRDNet-style crystal property network: graph attention plus a diffraction branch."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import global_mean_pool

from sciml.core import keys
from sciml.crystal.nn.diffraction import DiffractionBranch
from sciml.crystal.nn.embedding import AtomGraphEncoder
from sciml.crystal.nn.graph_attention import GraphAttentionBlock


class PRDNet(nn.Module):
    """Graph attention network fused with a reciprocal-space branch (PRDNet, ICLR 2026).

    ``y = MLP([mean_j h_j ; D(h, G)])`` where ``h`` are atom features after ``n_layers`` graph-attention
    blocks and ``D`` is :class:`~sciml.crystal.nn.diffraction.DiffractionBranch` fed with the element embedding
    ``h⁰`` (each element scatters as a learned pseudo-particle with its own ``f(Z, |G|)``). The output is
    intensive: invariant to rotation, translation,
    atom order and the choice of unit cell.

    Parameters
    ----------
    cutoff : float
        Neighbour cutoff, Å (the graph setting the data was built with).
    g_max : float
        Largest reflection |G|, Å⁻¹ (graph setting).
    dim, n_layers, n_rbf : int
        Width, depth and radial basis size of the graph part (the attention is per channel, no heads).
    n_bins, n_gauss : int
        Diffraction bins over |G| and Gaussians per scattering factor.
    diffraction : bool
        ``False`` drops the reciprocal-space branch (ablation).
    dropout : float
        Dropout before each head layer.
    ffn, edge_update : bool
        Feed-forward sublayer and edge update in every graph block
        (:class:`~sciml.crystal.nn.graph_attention.GraphAttentionBlock`); off by default for artifacts saved before they
        existed, on in ``configs/crystal/perov5.yaml``.
    site_resolved : bool
        Per-atom interference shares instead of one pattern per structure
        (:class:`~sciml.crystal.nn.diffraction.DiffractionBranch`).
    n_out : int
        Outputs per structure (2 for a zero-inflated target: a logit and a value).

    """

    def __init__(self, cutoff: float, g_max: float, dim: int = 64, n_layers: int = 3,
                 n_rbf: int = 40, n_bins: int = 32, n_gauss: int = 4, diffraction: bool = True,
                 dropout: float = 0.0, ffn: bool = False, edge_update: bool = False,
                 site_resolved: bool = False, n_out: int = 1) -> None:
        super().__init__()
        self.encoder = AtomGraphEncoder(dim, dim, cutoff, n_rbf)
        # the last block's edge update would feed nothing (and leave DDP with unused parameters)
        self.layers = nn.ModuleList(GraphAttentionBlock(dim, dim, ffn, edge_update and k < n_layers - 1)
                                    for k in range(n_layers))
        self.diffraction = DiffractionBranch(dim, g_max, n_bins, n_gauss, site_resolved) if diffraction else None
        width = 2 * dim if diffraction else dim
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(width, dim), nn.SiLU(), nn.Dropout(dropout),
                                  nn.Linear(dim, n_out))

    def embed(self, batch) -> torch.Tensor:
        """Structure representation fed to the head, shape ``(n_graphs, 2·dim)`` (``dim`` without diffraction).

        ``[mean_j h_j ; D(h⁰, G)]``: invariant like the output (rotation, translation, atom order, cell choice).
        """
        h0, e = self.encoder(batch)
        h = h0
        for layer in self.layers:
            h, e = layer(h, batch[keys.EDGE_INDEX], e)
        pooled = global_mean_pool(h, batch[keys.BATCH], size=len(batch[keys.N_ATOMS]))
        if self.diffraction is not None:
            pooled = torch.cat([pooled, self.diffraction(h0, batch)], dim=-1)
        return pooled

    def forward(self, batch) -> torch.Tensor:
        """Intensive outputs per structure, shape ``(n_graphs,)``, or ``(n_graphs, n_out)`` when ``n_out > 1``."""
        out = self.head(self.embed(batch))
        return out.squeeze(-1) if out.shape[-1] == 1 else out
