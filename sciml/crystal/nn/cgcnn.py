"""CGCNN-style baseline (Xie & Grossman 2018) built on PyG's ``CGConv``."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import CGConv, global_mean_pool

from sciml.core import keys
from sciml.crystal.nn.embedding import AtomGraphEncoder


class CGCNN(nn.Module):
    """Crystal graph convolutional network: gated convolutions, mean pooling, MLP head.

    ``h_i ← h_i + Σ_j σ(W_f z_ij) ⊙ softplus(W_s z_ij)`` with ``z_ij = [h_i, h_j, e_ij]`` (Eq. 5 of Xie &
    Grossman, PRL 120, 145301). Uses the same inputs as :class:`~sciml.crystal.nn.prdnet.PRDNet` so that the two
    are compared on identical graphs.

    Parameters
    ----------
    cutoff : float
        Neighbour cutoff, Å.
    g_max : float
        Unused (accepted so every network takes the same graph settings).
    dim, n_layers, n_rbf : int
        Width, number of convolutions and radial basis size.
    n_out : int
        Outputs per structure (2 for a zero-inflated target: a logit and a value).

    """

    def __init__(self, cutoff: float, g_max: float = 0.0, dim: int = 64, n_layers: int = 3,
                 n_rbf: int = 40, n_out: int = 1) -> None:
        super().__init__()
        self.encoder = AtomGraphEncoder(dim, dim, cutoff, n_rbf)
        self.convs = nn.ModuleList(CGConv(dim, dim, batch_norm=True) for _ in range(n_layers))
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.Softplus(), nn.Linear(dim, n_out))

    def embed(self, batch) -> torch.Tensor:
        """Mean-pooled atom features fed to the head, shape ``(n_graphs, dim)``."""
        h, e = self.encoder(batch)
        for conv in self.convs:
            h = conv(h, batch[keys.EDGE_INDEX].flip(0), e)
        return global_mean_pool(h, batch[keys.BATCH], size=len(batch[keys.N_ATOMS]))

    def forward(self, batch) -> torch.Tensor:
        """Intensive outputs per structure, shape ``(n_graphs,)``, or ``(n_graphs, n_out)`` when ``n_out > 1``."""
        out = self.head(self.embed(batch))
        return out.squeeze(-1) if out.shape[-1] == 1 else out
