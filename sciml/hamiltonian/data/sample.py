"""One molecule → one graph sample: H0/H block irreps on atoms (nodes) and atom pairs (edges), dense matrices.

A molecule becomes a graph with one node per atom and one directed edge per ordered pair ``i ≠ j`` within
``cutoff`` Å (all pairs for small molecules). Node ``i`` carries the on-site blocks ``H0_ii`` and ``H_ii``,
edge ``(i, j)`` the off-site blocks ``H0_ij`` and ``H_ij``, each decomposed into irreps with
:class:`~sciml.hamiltonian.nn.blocks.BlockBasis` (``l_i ⊗ l_j`` Clebsch–Gordan basis). Dense matrices
(e3nn order, Hartree) travel with the sample for assembly and the eigenvalue loss: ``H``, ``H0``, ``S``, the
Löwdin factor ``S^{-1/2}`` and the reference orbital energies (``n_occupied + n_virtual`` lowest). Training
(:mod:`sciml.hamiltonian.data.datamodule`) and prediction share it; it imports no Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from sciml.hamiltonian.nn.blocks import BlockBasis
from sciml.hamiltonian.orbitals import OrbitalLayout

if TYPE_CHECKING:
    from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["bases", "lowdin", "orbital_energies", "structure_to_sample"]


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
