"""Crystal Hamiltonians: frozen closed-form ridge + equivariant network residual, on real-space blocks H(R).

The items of a crystal are those of :func:`sciml.hamiltonian.crystal.crystal_items` (on-site blocks as nodes,
every other DeepH block ``(R, i, j)`` as an edge with vector ``r = x_j + R·L − x_i``, lattice shifts included).
The prediction of ``ΔH = H − H0`` per item is

    ΔH = ridge(H0, r) + σ_t · net(Ĥ0, r)          (edges with |r| ≤ cutoff; ridge alone beyond),

with :class:`~sciml.hamiltonian.nn.HamiltonianNet` on the sub-graph of edges within ``network["cutoff"]`` (Å;
default 6 Å: the nearest 46 (Si) to 158 (C) images per atom; the crystal edges reach 11–14 Å and running the
network on all ~980 per cell costs 3–10× more for blocks of ~µHa). Inputs ``Ĥ0`` are H0 irreps normalised
per type (:class:`~sciml.hamiltonian.nn.normalize.IrrepsNormalizer`, training statistics); the output scale
``σ_t`` is the per-type, per-irrep RMS of the training residual ``ΔH − ridge`` with the mean set to zero, and
the read-outs start at zero (as in :class:`~sciml.hamiltonian.module.HamiltonianModule`), so an untrained model
is exactly the ridge. Everything runs in float64.
"""

from __future__ import annotations

import torch
from torch import nn

from sciml.hamiltonian.crystal import crystal_items, ridge_irreps, structure_from_irreps
from sciml.hamiltonian.data.datamodule import bases
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.nn import HamiltonianNet
from sciml.hamiltonian.nn.normalize import IrrepsNormalizer
from sciml.hamiltonian.nn.ridge import TensorProductRidge

#: network settings for the 2-atom gth-szv cells (s, p shells: block irreps up to L = 2); ~70k parameters
CRYSTAL_NET = {"hidden": "16x0e+8x1o+8x1e+4x2e+4x2o", "lmax": 2, "n_layers": 2, "n_rbf": 16, "cutoff": 6.0,
               "radial_hidden": 32}
NORMS = ("x_node", "x_edge", "y_node", "y_edge")


class CrystalNet(nn.Module):
    """Ridge (buffers only, frozen) + :class:`HamiltonianNet` residual + normalisers, see the module docstring.

    Parameters
    ----------
    layout : OrbitalLayout
        Orbital shells per element (defines the block bases and type counts).
    ridge : dict
        :class:`TensorProductRidge` settings with the fitted ``shapes``.
    network : dict
        :class:`HamiltonianNet` keyword arguments (``CRYSTAL_NET`` keys); ``cutoff`` also selects the edges.

    """

    def __init__(self, layout: OrbitalLayout, ridge: dict, network: dict) -> None:
        super().__init__()
        self.layout, self.network = layout, CRYSTAL_NET | dict(network)
        nb, eb = self.bases = bases(layout)
        self.ridge = TensorProductRidge.from_settings(nb, eb, ridge)
        self.net = HamiltonianNet(str(nb.irreps), str(eb.irreps), len(nb.pairs), len(eb.pairs),
                                  **self.network).double()
        with torch.no_grad():
            for lin in (self.net.node_out, self.net.edge_out):
                lin.weight.zero_()
        shapes = {"x_node": nb, "y_node": nb, "x_edge": eb, "y_edge": eb}
        self.norms = nn.ModuleDict({k: IrrepsNormalizer(torch.zeros(len(b.pairs), b.irreps.dim),
                                                        torch.ones(len(b.pairs), b.irreps.dim))
                                    for k, b in shapes.items()})
        self.register_buffer("node_mask", torch.stack([nb.mask(*p) for p in nb.pairs]))
        self.register_buffer("edge_mask", torch.stack([eb.mask(*p) for p in eb.pairs]))

    def items(self, s: HamiltonianStructure) -> dict:
        """:func:`crystal_items` of ``s`` plus ``sel`` ``(E,)`` bool, the edges the network sees."""
        it = crystal_items(s, self.layout, *self.bases)
        it["sel"] = it["vec"].norm(dim=-1) <= float(self.network["cutoff"])
        return it

    def base(self, it: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Ridge ΔH irreps (Hartree), ``(N, Dn)`` and ``(E, De)``."""
        return ridge_irreps(self.ridge, it)

    def residual(self, it: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised network outputs: ``(N, Dn)`` per atom and ``(E_sel, De)`` per selected edge (masked)."""
        sel, nt = it["sel"], it["node_type"]
        et = it["edge_type"][sel]
        xn = self.norms["x_node"].normalize(it["x_node"], nt)
        xe = self.norms["x_edge"].normalize(it["x_edge"][sel], et)
        node, edge = self.net(nt, et, it["vec"][sel], it["edge_index"][:, sel], xn, xe)
        return node * self.node_mask[nt], edge * self.edge_mask[et]

    def forward(self, it: dict, base: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ΔH irreps (Hartree): ``(N, Dn)``, ``(E, De)``; ``base`` replaces the ridge's (training: cross-fitted)."""
        return self.combine(it, self.residual(it), self.base(it) if base is None else base)

    def combine(self, it: dict, residual: tuple, base: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """``base + σ_t · residual`` on the selected edges and all atoms (Hartree)."""
        node, edge = residual
        et = it["edge_type"][it["sel"]]
        dn = base[0] + self.norms["y_node"].denormalize(node, it["node_type"]) * self.node_mask[it["node_type"]]
        de = base[1].index_add(0, it["sel"].nonzero().flatten(),
                               self.norms["y_edge"].denormalize(edge, et) * self.edge_mask[et])
        return dn, de

    def set_statistics(self, stats: dict) -> None:
        """Copy ``{name: (mean, std)}`` (``NORMS`` keys) into the normalisers' buffers."""
        with torch.no_grad():
            for k, (mean, std) in stats.items():
                self.norms[k].mean.copy_(torch.as_tensor(mean, dtype=torch.float64))
                self.norms[k].std.copy_(torch.as_tensor(std, dtype=torch.float64))


def normaliser_statistics(model: CrystalNet, items: list[dict], residuals: list[tuple]) -> dict:
    """Training statistics: H0 irreps (inputs) and ``ΔH − ridge`` (outputs, mean 0) over atoms / selected edges."""
    nb, eb = model.bases
    cat = torch.cat
    xn, tn = cat([it["x_node"] for it in items]), cat([it["node_type"] for it in items])
    xe, te = cat([it["x_edge"][it["sel"]] for it in items]), cat([it["edge_type"][it["sel"]] for it in items])
    yn = cat([r[0] for r in residuals])
    ye = cat([r[1][it["sel"]] for r, it in zip(residuals, items, strict=True)])
    out = {"x_node": IrrepsNormalizer.statistics(xn, tn, nb.irreps, len(nb.pairs)),
           "x_edge": IrrepsNormalizer.statistics(xe, te, eb.irreps, len(eb.pairs))}
    for k, y, t, b in (("y_node", yn, tn, nb), ("y_edge", ye, te, eb)):
        _, std = IrrepsNormalizer.statistics(y, t, b.irreps, len(b.pairs))
        out[k] = (torch.zeros(len(b.pairs), b.irreps.dim).tolist(), std)
    return out


@torch.no_grad()
def predict_crystal_net(model: CrystalNet, s: HamiltonianStructure) -> HamiltonianStructure:
    """A copy of ``s`` with predicted ``H = H0 + ΔH`` blocks (symmetrised with their partners)."""
    it = model.items(s)
    dn, de = model(it)
    return structure_from_irreps(s, it, it["x_node"] + dn, it["x_edge"] + de, *model.bases)
