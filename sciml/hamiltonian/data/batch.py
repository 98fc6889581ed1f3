"""Batches of Hamiltonian graphs: molecules (dense matrices travel along) and crystals (band setups travel along).

Both share the graph part (:class:`GraphBatch`): one node per atom (its on-site block), one directed edge per
off-site block ``(i, j)`` (crystals: per ``(R, i, j)``), block irreps of H0 (input) and H (target) in Hartree,
and the Cartesian image shift of each edge (zero for molecules), so that ``r_ij = x_j + shift − x_i``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch


def _move(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    return value


@dataclass
class GraphBatch:
    """Graph fields shared by molecules and crystals (``N`` atoms, ``E`` directed edges, concatenated)."""

    z: torch.Tensor  # (N,) int64 atomic numbers
    pos: torch.Tensor  # (N, 3) float64, Å
    batch: torch.Tensor  # (N,) int64 graph of each atom
    node_type: torch.Tensor  # (N,) int64 index into the on-site basis pairs
    edge_index: torch.Tensor  # (2, E) int64 [i, j]: the edge's block is H_ij (crystals: H_ij(R))
    edge_type: torch.Tensor  # (E,) int64 index into the off-site basis pairs
    shift: torch.Tensor  # (E, 3) float64 Cartesian image shift R·L, Å (zero for molecules)
    net_edge: torch.Tensor  # (E,) bool: edges the network sees (|r| <= cutoff); the ridge sees all
    x_node: torch.Tensor  # (N, Dn) H0 on-site irreps, Hartree
    x_edge: torch.Tensor  # (E, De) H0 off-site irreps, Hartree
    h_node: torch.Tensor  # (N, Dn) H on-site irreps, Hartree (zeros without a target)
    h_edge: torch.Tensor  # (E, De) H off-site irreps, Hartree (zeros without a target)
    # the ridge base model's ΔH irreps (N, Dn), (E, De) float64 Hartree, and the token of the ridge that computed
    # them, when every sample carries them (sciml.hamiltonian.model.attach_base); else None
    base_node: torch.Tensor | None = field(default=None, kw_only=True)
    base_edge: torch.Tensor | None = field(default=None, kw_only=True)
    base_token: str | None = field(default=None, kw_only=True)

    def to(self, device):
        return type(self)(**{f.name: _move(getattr(self, f.name), device) for f in fields(self)})

    def __getitem__(self, key: str):
        return getattr(self, key)

    def vectors(self) -> torch.Tensor:
        """Edge vectors ``r_ij = x_j + shift − x_i`` ``(E, 3)``, float64, Å (differentiable in ``pos``)."""
        i, j = self.edge_index
        return self.pos[j].double() + self.shift - self.pos[i].double()


@dataclass
class HamiltonianBatch(GraphBatch):
    """Molecules plus their dense matrices flattened: ``G`` graphs, ``F = Σ_g n_ao_g²``, ``K = Σ_g n_eig_g``.

    Matrices in e3nn order, Hartree.
    """

    ao_offset: torch.Tensor  # (N,) int64 first AO of the atom in its matrix
    n_ao: torch.Tensor  # (G,) int64
    mat_ptr: torch.Tensor  # (G + 1,) int64 offsets of each graph's flattened matrices
    h: torch.Tensor  # (F,) float64 H
    h0: torch.Tensor  # (F,) float64 H0
    s: torch.Tensor  # (F,) float64 S
    s_inv_half: torch.Tensor  # (F,) float64 S^{-1/2}
    y: torch.Tensor  # (K,) float64 reference orbital energies (keys.TARGET), Hartree
    n_eig: torch.Tensor  # (G,) int64 orbital energies per graph
    n_occ: torch.Tensor  # (G,) int64 doubly occupied orbitals per graph

    periodic = False

    @property
    def num_graphs(self) -> int:
        return len(self.n_ao)


@dataclass
class CrystalBatch(GraphBatch):
    """Crystals: per-crystal sizes, block keys and band setups (:func:`sciml.hamiltonian.data.crystal.band_setup`)."""

    n_nodes: torch.Tensor  # (G,) int64 atoms per crystal
    n_edges: torch.Tensor  # (G,) int64 edges (off-site blocks) per crystal
    keys: list  # per crystal: (node_keys, edge_keys), DeepH keys of its items
    bands: list  # per crystal: band setup dict, or None (no k-points / no target)

    periodic = True

    @property
    def num_graphs(self) -> int:
        return len(self.n_nodes)


_GRAPH = ("z", "pos", "node_type", "x_node", "h_node", "edge_type", "shift", "net_edge", "x_edge", "h_edge")
_MOLECULE = ("ao_offset", "n_ao", "h", "h0", "s", "s_inv_half", "y", "n_eig", "n_occ")


def _graph_part(samples: list[dict]) -> dict:
    n_atoms = torch.tensor([len(s["z"]) for s in samples])
    starts = torch.cumsum(n_atoms, 0) - n_atoms
    out = {k: torch.cat([s[k] for s in samples]) for k in _GRAPH}
    out["edge_index"] = torch.cat([s["edge_index"] + st for s, st in zip(samples, starts, strict=True)], dim=1)
    out["batch"] = torch.repeat_interleave(torch.arange(len(samples)), n_atoms)
    tokens = {s.get("base_token") for s in samples}
    if len(tokens) == 1 and None not in tokens:
        out |= {k: torch.cat([s[k] for s in samples]) for k in ("base_node", "base_edge")}
        out["base_token"] = tokens.pop()
    return out


def collate(samples: list[dict]) -> HamiltonianBatch:
    """Concatenate molecule samples; shift edge indices by the atoms before them; build ``batch``/``mat_ptr``."""
    out = _graph_part(samples) | {k: torch.cat([s[k] for s in samples]) for k in _MOLECULE}
    out["mat_ptr"] = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(out["n_ao"] ** 2, 0)])
    return HamiltonianBatch(**out)


def collate_crystals(samples: list[dict]) -> CrystalBatch:
    """Concatenate crystal samples (:func:`sciml.hamiltonian.data.crystal.crystal_sample`)."""
    return CrystalBatch(**_graph_part(samples), n_nodes=torch.tensor([len(s["z"]) for s in samples]),
                        n_edges=torch.tensor([s["edge_index"].shape[1] for s in samples]),
                        keys=[s["keys"] for s in samples], bands=[s["bands"] for s in samples])
