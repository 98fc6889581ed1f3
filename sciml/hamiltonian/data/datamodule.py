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
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader

from sciml.core.datamodule import SplitDataModule
from sciml.core.splits import group_split, random_split, write_split
from sciml.hamiltonian.data.batch import HamiltonianBatch, collate, collate_crystals
from sciml.hamiltonian.nn.blocks import BlockBasis
from sciml.hamiltonian.orbitals import OrbitalLayout

if TYPE_CHECKING:
    from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["HamiltonianBatch", "HamiltonianDataModule", "bases", "collate", "collate_crystals", "lowdin",
           "orbital_energies", "structure_to_sample"]

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
           "shift": torch.zeros(len(edges), 3, dtype=torch.float64),
           "net_edge": torch.ones(len(edges), dtype=torch.bool),
           "edge_type": torch.tensor([edge_basis.pair_index(z[a], z[b]) for a, b in edges], dtype=torch.long),
           "x_node": irreps(dense["H0"], nodes, node_basis), "x_edge": irreps(dense["H0"], edges, edge_basis),
           "h_node": irreps(h, nodes, node_basis), "h_edge": irreps(h, edges, edge_basis),
           "n_ao": torch.tensor([int(off[-1])]), "h": torch.from_numpy(h).reshape(-1),
           "h0": torch.from_numpy(dense["H0"]).reshape(-1), "s": torch.from_numpy(dense["S"]).reshape(-1),
           "s_inv_half": torch.from_numpy(s_inv_half).reshape(-1),
           "y": torch.from_numpy(orbital_energies(h, s_inv_half, n_eig)),
           "n_eig": torch.tensor([n_eig]), "n_occ": torch.tensor([n_occ])}
    return out


class HamiltonianDataModule(SplitDataModule):
    """Read molecules (an npz of conformers) or crystals (a folder of periodic DeepH folders), featurise, split.

    Parameters
    ----------
    path : str
        npz file in the shared format (``../shared/data/hamiltonian/*.npz``: molecules), a folder of such files
        (one molecule each: a many-molecule set), or a folder holding periodic DeepH folders (``sciml data
        hamiltonian --crystal``: crystals, see :mod:`sciml.hamiltonian.data.crystal`).
    split : dict
        ``fractions`` (train, val, calib, test), ``seed`` and ``by`` (``"conformer"``, or ``"molecule"``: every
        conformer of a molecule in one split, :func:`~sciml.core.splits.group_split`); written to
        ``<run_dir>/split.json``.
    batch_size, num_workers : int
        Loader settings (structures per batch).
    cutoff : float
        Molecules: pairs within it (Å) are edges, the others keep H0. Crystals: blocks within it are network
        edges, the closed-form ridge alone predicts the others.
    n_virtual : int
        Virtual orbitals (bands) included in the orbital-energy (band-energy) target and loss.
    limit : int or None
        Use only the first ``limit`` structures (tests).
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
        self.split_by = str(split.get("by", "conformer"))
        self.folder = Path(path).is_dir() and any(Path(path).glob("*.npz"))  # one npz per molecule
        self.periodic = Path(path).is_dir() and not self.folder
        self.datasets: dict[str, list[dict]] = {}

    def read(self) -> list[HamiltonianStructure]:
        """The structures of ``path`` (first ``limit``); sets ``layout`` and ``meta`` (level of theory)."""
        if not Path(self.path).exists():
            raise FileNotFoundError(f"data.path {self.path}: no such file or folder (molecules: an npz from "
                                    "`sciml data hamiltonian --molecule`; crystals: a folder from `--crystal`)")
        if self.periodic:
            from sciml.hamiltonian.data.crystal import read_crystals

            structures, self.layout = read_crystals(self.path)
        elif self.folder:
            from sciml.hamiltonian.data.npz import read_npz_folder

            structures, self.layout = read_npz_folder(self.path)
        else:
            from sciml.hamiltonian.data.npz import read_npz

            structures, self.layout = read_npz(self.path)
        if self.split_by == "molecule" and not self.folder:
            raise ValueError(f"data.split.by is 'molecule' but data.path {self.path} is not a folder of npz files "
                             "(one per molecule); use by: conformer or point data.path at such a folder")
        structures = structures[: self.limit] if self.limit else structures
        self.meta = {k: structures[0].meta.get(k) for k in ("basis", "xc")}
        if not self.periodic:
            self.meta["h0"] = str(structures[0].meta.get("h0", "full"))
        else:
            from sciml.hamiltonian.data.gen_crystal import generator_settings

            self.meta |= {"periodic": True, "generator": generator_settings(structures)}
        return structures

    def sample(self, s: HamiltonianStructure, with_target: bool = True) -> dict:
        """One featurised structure (molecule or crystal)."""
        if self.periodic:
            from sciml.hamiltonian.data.crystal import crystal_sample

            return crystal_sample(s, self.layout, self.node_basis, self.edge_basis, self.cutoff, self.n_virtual,
                                  with_target)
        return structure_to_sample(s, self.layout, self.node_basis, self.edge_basis, self.cutoff, self.n_virtual,
                                   with_target)

    def setup(self, stage: str | None = None) -> None:
        """Read, featurise and split the data (once)."""
        if self.datasets:
            return
        structures = self.read()
        self.node_basis, self.edge_basis = bases(self.layout)
        samples = [self.sample(s) for s in structures]
        if self.split_by == "molecule":
            split = group_split([s.meta["molecule"] for s in structures], self.fractions, self.seed)
        else:
            split = random_split(len(samples), self.fractions, self.seed)
        self.split = {k: v.tolist() for k, v in split.items()}
        self.datasets = {name: [samples[i] for i in idx] for name, idx in split.items()}
        self.structures = {name: [structures[i] for i in idx] for name, idx in split.items()}
        if self.run_dir:
            ids = ([str(s.meta.get("source", k)) for k, s in enumerate(structures)] if self.periodic else
                   [f"{Path(s.meta.get('source', self.path)).name}:{s.meta.get('index', k)}"
                    for k, s in enumerate(structures)])
            write_split(Path(self.run_dir) / "split.json", ids, split, self.seed)
        log.info("split sizes: %s", self.split_sizes())

    @property
    def collate_fn(self):
        return collate_crystals if self.periodic else collate

    def loader(self, name: str, shuffle: bool = False) -> DataLoader:
        return DataLoader(self.datasets[name], batch_size=self.batch_size, shuffle=shuffle, collate_fn=self.collate_fn,
                          num_workers=self.num_workers)

    def split_sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.datasets.items()}
