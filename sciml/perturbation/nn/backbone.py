r"""PAD-Transformer: the velocity network of the perturbation flow model (after scDFM, ICLR 2026).

Genes are tokens. Token ``g`` of cell ``i`` is ``E_g + f(x_t[i, g]) + F·[g perturbed]`` (gene embedding,
value encoder of the current state, perturbed-gene flag); control tokens are ``E_g + f_c(x_ctrl[i, g],
x̄_ctrl[g])`` (paired control cell and control-population mean). Each block applies, with adaLN-Zero
modulation by ``c = τ(t) + p`` (time embedding plus perturbation embedding, DiT: Peebles & Xie 2023),
differential self-attention over genes (masked by the gene graph), differential cross-attention to the
control tokens, and an MLP. A zero-initialised head maps each token to its velocity ``v[i, g]``.

Cells never interact, so the network is equivariant to permuting cells (jointly with their paired
controls).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from sciml.perturbation.nn.attention import DifferentialAttention
from sciml.perturbation.nn.embedding import PerturbationEmbedding, TimeEmbedding, ValueEncoder
from sciml.perturbation.nn.graph import adjacency_from_edges, compact_mask, submask


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN: ``x·(1 + scale) + shift`` with ``shift, scale`` ``(B, dim)`` broadcast over tokens."""
    return x * (1 + scale[:, None]) + shift[:, None]


class PADBlock(nn.Module):
    """One adaLN-Zero block: masked differential self-attention, cross-attention to control, MLP."""

    def __init__(self, dim: int, heads: int, depth: int, mlp_ratio: int = 2) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim, elementwise_affine=False) for _ in range(3))
        self.self_attn = DifferentialAttention(dim, heads, depth)
        self.cross_attn = DifferentialAttention(dim, heads, depth)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 9 * dim))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, h: Tensor, ctrl: Tensor, cond: Tensor, mask: Tensor | None,
                ctrl_kv: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``h`` ``(B, G, dim)``, ``ctrl`` ``(B, G, dim)``, ``cond`` ``(B, dim)`` → ``(B, G, dim)``.

        ``ctrl_kv``: the cross-attention keys and values of ``ctrl``, precomputed (constant across ODE steps).
        """
        mods = self.ada(cond).chunk(9, -1)
        h = h + mods[2][:, None] * self.self_attn(modulate(self.norms[0](h), mods[0], mods[1]), mask=mask)
        h = h + mods[5][:, None] * self.cross_attn(modulate(self.norms[1](h), mods[3], mods[4]), ctrl, mask,
                                                   ctrl_kv)
        return h + mods[8][:, None] * self.mlp(modulate(self.norms[2](h), mods[6], mods[7]))


class PADTransformer(nn.Module):
    """Velocity field ``v_θ(x_t, t | x_ctrl, perturbation)`` over a vocabulary of ``n_genes`` genes.

    Parameters
    ----------
    n_genes : int
        Gene vocabulary size ``V`` (the data module's ``perturbation_genes``: the measured genes in column
        order, then perturbed genes that are not measured).
    dim, depth, heads : int
        Token width, number of blocks, attention heads.
    hops : int
        Graph-propagation hops of the perturbation embedding.
    graph_mask : bool
        Mask attention with the gene graph (set by :meth:`set_graph`); otherwise attention is dense.
    prior_channels : int
        Extra per-gene conditioning channels ``k`` added to the control tokens (e.g. the measured effects of
        the perturbed genes' singles, see :class:`~sciml.perturbation.model.PerturbationModel`).

    Notes
    -----
    The buffer ``adjacency`` ``(V, V)`` bool holds the gene graph; it is saved in the ``state_dict`` (empty
    until :meth:`set_graph`, i.e. no graph: dense attention and no propagation).

    """

    def __init__(self, n_genes: int, dim: int = 64, depth: int = 2, heads: int = 4, hops: int = 2,
                 graph_mask: bool = True, prior_channels: int = 0) -> None:
        super().__init__()
        self.n_genes, self.graph_mask = n_genes, graph_mask
        self.gene = nn.Embedding(n_genes, dim)
        nn.init.normal_(self.gene.weight, std=0.02)
        self.value = ValueEncoder(dim, 1)
        self.ctrl_value = ValueEncoder(dim, 2 + prior_channels)
        self.flag = nn.Parameter(torch.zeros(dim))
        self.time = TimeEmbedding(dim)
        self.pert = PerturbationEmbedding(n_genes, dim, hops)
        self.blocks = nn.ModuleList(PADBlock(dim, heads, i) for i in range(depth))
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.head = nn.Linear(dim, 1)
        for layer in (self.final_ada[1], self.head):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.register_buffer("adjacency", torch.empty(0, 0, dtype=torch.bool))

    def set_graph(self, edge_index: Tensor) -> None:
        """Store the gene graph ``(2, E)`` as the ``adjacency`` buffer."""
        self.adjacency = adjacency_from_edges(edge_index, self.n_genes).to(self.gene.weight.device)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        incoming = state_dict.get(prefix + "adjacency")
        if isinstance(incoming, Tensor):
            self.adjacency = torch.empty_like(incoming, dtype=torch.bool, device=self.gene.weight.device)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def encode_context(self, x_ctrl: Tensor, ctrl_mean: Tensor, pert: Tensor, genes: Tensor | None = None,
                       prior: Tensor | None = None) -> dict:
        """Everything of :meth:`forward` that does not depend on ``x_t`` or ``t`` (cached across ODE steps).

        Shapes as in :meth:`forward`; returns a dict for its ``context`` argument.
        """
        idx = torch.arange(x_ctrl.shape[-1], device=x_ctrl.device) if genes is None else genes
        table = self.gene(idx)[None]
        is_pert = (idx[None, :, None] == pert[:, None, :]).any(-1, keepdim=True).to(x_ctrl.dtype)
        channels = torch.stack([x_ctrl, ctrl_mean], -1)
        if prior is not None:
            channels = torch.cat([channels, prior], -1)
        ctrl = table + self.ctrl_value(channels)
        return {"table": table, "is_pert": is_pert, "ctrl": ctrl,
                "pert": self.pert(pert, self.gene.weight, self.adjacency),
                "mask": compact_mask(submask(self.adjacency, idx)) if self.graph_mask else None,
                "kv": [block.cross_attn.keys_values(ctrl) for block in self.blocks]}

    def forward(self, x_t: Tensor, t: Tensor, x_ctrl: Tensor | None = None, ctrl_mean: Tensor | None = None,
                pert: Tensor | None = None, genes: Tensor | None = None, prior: Tensor | None = None,
                context: dict | None = None) -> Tensor:
        """Velocity ``(B, G)``.

        Parameters
        ----------
        x_t, x_ctrl, ctrl_mean : Tensor
            ``(B, G)``: state at time ``t``, paired control cell, control-population mean (log1p units).
        t : Tensor
            ``(B,)`` flow time in ``[0, 1]``.
        pert : Tensor
            ``(B, P)`` int64 vocabulary indices of the perturbed genes, ``−1`` padding (all ``−1``: control).
        genes : Tensor or None
            ``(G,)`` vocabulary indices of the columns (a gene subset); ``None`` means the first ``G``
            vocabulary entries (the measured genes come first in the vocabulary, unmeasured perturbed
            genes after them).
        prior : Tensor or None
            ``(B, G, prior_channels)`` extra per-gene conditioning (required when ``prior_channels > 0``).
        context : dict or None
            :meth:`encode_context` of ``x_ctrl, ctrl_mean, pert, genes, prior`` (then those are not used): the
            same result, without recomputing the control tokens, their cross-attention keys and values, the
            perturbation embedding and the mask at every ODE step.

        """
        if context is None:
            context = self.encode_context(x_ctrl, ctrl_mean, pert, genes, prior)
        h = context["table"] + self.value(x_t[..., None]) + context["is_pert"] * self.flag
        cond = self.time(t) + context["pert"]
        for block, kv in zip(self.blocks, context["kv"], strict=True):
            h = block(h, context["ctrl"], cond, context["mask"], kv)
        shift, scale = self.final_ada(cond).chunk(2, -1)
        return self.head(modulate(self.final_norm(h), shift, scale)).squeeze(-1)
