"""Mean of independently trained crystal networks: one network to the rest of the package."""

from __future__ import annotations

import torch
from torch import nn


class MeanEnsemble(nn.Module):
    """Average of ``M`` crystal networks trained on the same standardised target (a deep ensemble).

    ``f(x) = (1/M) Σ_m f_m(x)``: averaging independently trained networks lowers the variance part of the error
    (Lakshminarayanan, Pritzel & Blundell 2017, "Simple and scalable predictive uncertainty estimation using deep
    ensembles"). Each member keeps every invariance it has (rotation, translation, atom order, cell choice), so the
    mean keeps them too. For a zero-inflated target (``n_out = 2``) the logits and the values are averaged
    separately.

    The applicability domain reads one fixed representation: :meth:`embed` and :attr:`head` are the first
    member's.

    Parameters
    ----------
    cutoff, g_max : float
        Graph settings (Å, Å⁻¹), passed to every member.
    members : list of dict
        ``name`` (a key of :data:`sciml.crystal.nn.NETWORKS`, not ``ensemble``) and keyword arguments of each member.
    n_out : int
        Outputs per structure, passed to every member.

    """

    def __init__(self, cutoff: float, g_max: float, members: list[dict], n_out: int = 1) -> None:
        super().__init__()
        from sciml.crystal.nn import NETWORKS  # the package imports this module first

        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
        nets = []
        for k, member in enumerate(members):
            name = member.get("name")
            if name not in NETWORKS:
                raise ValueError(f"ensemble member {k}: unknown network {name!r}; known: {sorted(NETWORKS)}")
            kwargs = {key: value for key, value in member.items() if key != "name"}
            nets.append(NETWORKS[name](cutoff=cutoff, g_max=g_max, n_out=n_out, **kwargs))
        self.members = nn.ModuleList(nets)

    @property
    def head(self) -> nn.Module:
        """The first member's head (``embed(..., layer="hidden")`` reads its hidden layer)."""
        return self.members[0].head

    def embed(self, batch) -> torch.Tensor:
        """The first member's structure representation, shape ``(n_graphs, d)``."""
        return self.members[0].embed(batch)

    def forward(self, batch) -> torch.Tensor:
        """Mean of the members' outputs, shape ``(n_graphs,)`` or ``(n_graphs, n_out)``."""
        return torch.stack([member(batch) for member in self.members]).mean(dim=0)
