"""Hamiltonian data module: structures → graphs with H0/H block irreps, seeded splits, batching (docs/design.md §3).

A molecule becomes a graph with one node per atom and one directed edge per ordered pair ``i ≠ j`` within
``cutoff`` Å (all pairs for small molecules). Node ``i`` carries the on-site blocks ``H0_ii`` and ``H_ii``,
edge ``(i, j)`` the off-site blocks ``H0_ij`` and ``H_ij``, each decomposed into irreps with
:class:`~sciml.hamiltonian.nn.blocks.BlockBasis` (``l_i ⊗ l_j`` Clebsch–Gordan basis). Dense matrices
(e3nn order, Hartree) travel with the batch for assembly and the eigenvalue loss: ``H``, ``H0``, ``S``, the
Löwdin factor ``S^{-1/2}`` and the reference orbital energies (``n_occupied + n_virtual`` lowest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader

from sciml.core.datamodule import SplitDataModule
from sciml.core.splits import random_split, write_split
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.nn.blocks import BlockBasis

if TYPE_CHECKING:
    from sciml.hamiltonian.structure import HamiltonianStructure

log = logging.getLogger(__name__)


def bases(layout: OrbitalLayout) -> tuple[BlockBasis, BlockBasis]:
    """On-site basis (pairs ``(z, z)``) and off-site basis (every ordered pair) of a layout's elements."""
    zs = layout.elements()
    return (BlockBasis(layout.shells, [(z, z) for z in zs]),
            BlockBasis(layout.shells, [(a, b) for a in zs for b in zs]))


def lowdin(s: np.ndarray) -> np.ndarray:
    """``S^{-1/2}`` of a symmetric positive-definite overlap matrix (Löwdin orthogonalisation)."""
    w, v = np.linalg.eigh(s)
    if w.min() <= 0:
        raise ValueError(f"overlap matrix is not positive definite (smallest eigenvalue {w.min():.3e})")
    return (v / np.sqrt(w)) @ v.T


def orbital_energies(h: np.ndarray, s_inv_half: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` lowest eigenvalues of ``H C = S C ε`` (Hartree), via ``eigvalsh(S^{-1/2} H S^{-1/2})``."""
    return np.linalg.eigvalsh(s_inv_half @ h @ s_inv_half)[:n]


@dataclass
class HamiltonianBatch:
    """One or more molecular graphs, concatenated (PyG-style), plus their dense matrices flattened.

    Shapes: ``N`` atoms, ``E`` directed edges, ``G`` graphs, ``F = Σ_g n_ao_g²``, ``K = Σ_g n_eig_g``.
    Irreps in Hartree, unnormalised; matrices in e3nn order, Hartree.
    """

    z: torch.Tensor  # (N,) int64 atomic numbers
    pos: torch.Tensor  # (N, 3) float64, Å
    batch: torch.Tensor  # (N,) int64 graph of each atom
    node_type: torch.Tensor  # (N,) int64 index into the on-site basis pairs
    ao_offset: torch.Tensor  # (N,) int64 first AO of the atom in its matrix
    edge_index: torch.Tensor  # (2, E) int64 [i, j]: the edge's block is H_ij
    edge_type: torch.Tensor  # (E,) int64 index into the off-site basis pairs
    x_node: torch.Tensor  # (N, Dn) H0 on-site irreps
    x_edge: torch.Tensor  # (E, De) H0 off-site irreps
    h_node: torch.Tensor  # (N, Dn) H on-site irreps
    h_edge: torch.Tensor  # (E, De) H off-site irreps
    n_ao: torch.Tensor  # (G,) int64
    mat_ptr: torch.Tensor  # (G + 1,) int64 offsets of each graph's flattened matrices
    h: torch.Tensor  # (F,) float64 H
    h0: torch.Tensor  # (F,) float64 H0
    s: torch.Tensor  # (F,) float64 S
    s_inv_half: torch.Tensor  # (F,) float64 S^{-1/2}
    y: torch.Tensor  # (K,) float64 reference orbital energies (keys.TARGET), Hartree
    n_eig: torch.Tensor  # (G,) int64 orbital energies per graph
    n_occ: torch.Tensor  # (G,) int64 doubly occupied orbitals per graph

    def to(self, device) -> HamiltonianBatch:
        return HamiltonianBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def __getitem__(self, key: str) -> torch.Tensor:
        return getattr(self, key)

    @property
    def num_graphs(self) -> int:
        return len(self.n_ao)


def structure_to_sample(s: HamiltonianStructure, layout: OrbitalLayout, node_basis: BlockBasis,
                        edge_basis: BlockBasis, cutoff: float = 100.0, n_virtual: int = 3,
                        with_target: bool = True) -> dict[str, torch.Tensor]:
    """Featurise one molecule into a dict of tensors (one graph of :class:`HamiltonianBatch`).

    Needs the ``H0`` and ``S`` blocks; ``H`` (target) when ``with_target``. Pairs beyond ``cutoff`` Å get no
    edge: their predicted block is H0's. ``n_virtual`` virtual orbitals join the occupied ones in ``y``.
    """
    if s.is_periodic:
        raise ValueError("the molecular data path needs lattice=None; crystals are not supported here yet")
    z = [int(v) for v in s.numbers]
    n = len(z)
    dist = np.linalg.norm(s.positions[:, None] - s.positions[None], axis=-1)
    ii, jj = np.nonzero((dist <= cutoff) & ~np.eye(n, dtype=bool))
    names = ["H0", "S"] + (["H"] if with_target else [])
    dense = {k: s.to_dense(k, layout) for k in names}
    off = layout.atom_offsets(z)

    def irreps(mat, pairs, basis):
        rows = [basis.to_irreps(torch.from_numpy(mat[off[a]:off[a + 1], off[b]:off[b + 1]]), z[a], z[b])
                for a, b in pairs]
        return torch.stack(rows) if rows else torch.zeros(0, basis.dim, dtype=torch.float64)

    nodes, edges = [(a, a) for a in range(n)], list(zip(ii.tolist(), jj.tolist(), strict=True))
    s_inv_half = lowdin(dense["S"])
    n_occ = int(s.meta.get("n_occupied", -1))
    if n_occ < 1:
        raise ValueError(f"structure {s.meta.get('source', '')}: meta has no n_occupied (doubly occupied orbitals)")
    n_eig = min(n_occ + n_virtual, int(off[-1]))
    h = dense.get("H", dense["H0"])
    out = {"z": torch.tensor(z), "pos": torch.from_numpy(s.positions).double(),
           "node_type": torch.tensor([node_basis.pair_index(v, v) for v in z]),
           "ao_offset": torch.from_numpy(off[:-1]).long(),
           "edge_index": torch.tensor(np.stack([ii, jj])).long().reshape(2, -1),
           "edge_type": torch.tensor([edge_basis.pair_index(z[a], z[b]) for a, b in edges], dtype=torch.long),
           "x_node": irreps(dense["H0"], nodes, node_basis), "x_edge": irreps(dense["H0"], edges, edge_basis),
           "h_node": irreps(h, nodes, node_basis), "h_edge": irreps(h, edges, edge_basis),
           "n_ao": torch.tensor([int(off[-1])]), "h": torch.from_numpy(h).reshape(-1),
           "h0": torch.from_numpy(dense["H0"]).reshape(-1), "s": torch.from_numpy(dense["S"]).reshape(-1),
           "s_inv_half": torch.from_numpy(s_inv_half).reshape(-1),
           "y": torch.from_numpy(orbital_energies(h, s_inv_half, n_eig)),
           "n_eig": torch.tensor([n_eig]), "n_occ": torch.tensor([n_occ])}
    return out


_PER_NODE = ("z", "pos", "node_type", "ao_offset", "x_node", "h_node")
_PER_EDGE = ("edge_type", "x_edge", "h_edge")
_PER_GRAPH = ("n_ao", "h", "h0", "s", "s_inv_half", "y", "n_eig", "n_occ")


def collate(samples: list[dict]) -> HamiltonianBatch:
    """Concatenate samples; shift edge indices by the atoms before them and build ``batch``/``mat_ptr``."""
    n_atoms = torch.tensor([len(s["z"]) for s in samples])
    starts = torch.cumsum(n_atoms, 0) - n_atoms
    out = {k: torch.cat([s[k] for s in samples]) for k in _PER_NODE + _PER_EDGE + _PER_GRAPH}
    out["edge_index"] = torch.cat([s["edge_index"] + st for s, st in zip(samples, starts, strict=True)], dim=1)
    out["batch"] = torch.repeat_interleave(torch.arange(len(samples)), n_atoms)
    out["mat_ptr"] = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(out["n_ao"] ** 2, 0)])
    return HamiltonianBatch(**out)


class HamiltonianDataModule(SplitDataModule):
    """Read an npz of conformers (``sciml.hamiltonian.data.npz.read_npz``), featurise and split it.

    Parameters
    ----------
    path : str
        npz file in the shared format (``../shared/data/hamiltonian/*.npz``).
    split : dict
        ``fractions`` (train, val, calib, test) and ``seed``; written to ``<run_dir>/split.json``.
    batch_size, num_workers : int
        Loader settings.
    cutoff : float
        Edge cutoff, Å.
    n_virtual : int
        Virtual orbitals included in the orbital-energy target and loss.
    limit : int or None
        Use only the first ``limit`` conformers (tests).
    run_dir : str or None
        Where ``split.json`` goes.

    """

    def __init__(self, path: str, split: dict | None = None, batch_size: int = 32, num_workers: int = 0,
                 cutoff: float = 100.0, n_virtual: int = 3, limit: int | None = None,
                 run_dir: str | None = None) -> None:
        super().__init__()
        split = split or {}
        self.path, self.batch_size, self.num_workers = path, batch_size, num_workers
        self.cutoff, self.n_virtual, self.limit, self.run_dir = cutoff, n_virtual, limit, run_dir
        self.fractions, self.seed = split.get("fractions", [0.7, 0.05, 0.1, 0.15]), int(split.get("seed", 0))
        self.datasets: dict[str, list[dict]] = {}

    def setup(self, stage: str | None = None) -> None:
        """Read, featurise and split the data (once)."""
        if self.datasets:
            return
        from sciml.hamiltonian.data.npz import read_npz

        structures, self.layout = read_npz(self.path)
        if self.limit:
            structures = structures[: self.limit]
        self.meta = {k: structures[0].meta.get(k) for k in ("basis", "xc")}
        self.node_basis, self.edge_basis = bases(self.layout)
        samples = [structure_to_sample(s, self.layout, self.node_basis, self.edge_basis, self.cutoff, self.n_virtual)
                   for s in structures]
        split = random_split(len(samples), self.fractions, self.seed)
        self.split = {k: v.tolist() for k, v in split.items()}
        self.datasets = {name: [samples[i] for i in idx] for name, idx in split.items()}
        if self.run_dir:
            ids = [f"{Path(self.path).name}:{s.meta.get('index', k)}" for k, s in enumerate(structures)]
            write_split(Path(self.run_dir) / "split.json", ids, split, self.seed)
        log.info("split sizes: %s", self.split_sizes())

    def loader(self, name: str, shuffle: bool = False) -> DataLoader:
        return DataLoader(self.datasets[name], batch_size=self.batch_size, shuffle=shuffle, collate_fn=collate,
                          num_workers=self.num_workers)





    def split_sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.datasets.items()}
