"""Periodic neighbour lists, differentiable edge vectors and reciprocal-lattice enumeration.

The one neighbour list of the package. Conventions (see :mod:`sciml.core.keys`): lattice vectors are the rows of
``L`` (Å); edge ``e = (i, j)`` with image shift ``S_e`` (integers, lattice-vector units) has the vector

    r_ij = x_j + S_e · L - x_i,

where ``x`` are the Cartesian positions ``structure.cart_coords`` as stored (not wrapped into the cell).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from pymatgen.core import Structure


def neighbor_list(
    structure: Structure,
    cutoff: float,
    max_neighbors: int | None = None,
    tie_tol: float = 1e-4,
) -> tuple[np.ndarray, np.ndarray]:
    """All periodic pairs within ``cutoff`` Å, optionally the ``max_neighbors`` nearest per centre.

    Parameters
    ----------
    structure : pymatgen.core.Structure
        Periodic structure with ``n`` sites.
    cutoff : float
        Radius in Å (inclusive, up to pymatgen's 1e-8 Å tolerance).
    max_neighbors : int, optional
        Keep, per centre, the ``max_neighbors`` nearest neighbours plus every neighbour whose distance is
        within ``tie_tol`` of the ``max_neighbors``-th one, so the kept set does not depend on atom order
        or on the choice of unit cell. ``None`` keeps all pairs within ``cutoff``.
    tie_tol : float
        Distance tolerance for ties, Å.

    Returns
    -------
    edge_index : np.ndarray, shape (2, E), int64
        ``[centre i, neighbour j]``; periodic images of ``i`` itself are included, the zero-distance
        self-pair is not.
    shifts : np.ndarray, shape (E, 3), float64
        Integer image offsets of ``j`` in lattice-vector units.

    Notes
    -----
    Edges are sorted by centre, then distance, then ``j``, then shift. An atom with no neighbour within
    ``cutoff`` simply has no edges: this function does not raise; callers that need connected graphs check.

    """
    if not np.isfinite(cutoff) or cutoff <= 0:
        raise ValueError(f"cutoff must be a positive number of Å, got {cutoff}")
    if max_neighbors is not None and max_neighbors < 1:
        raise ValueError(f"max_neighbors must be >= 1 or None, got {max_neighbors}")
    centre, neighbour, images, dist = structure.get_neighbor_list(float(cutoff))
    centre = np.asarray(centre, dtype=np.int64)
    neighbour = np.asarray(neighbour, dtype=np.int64)
    shifts = np.rint(np.asarray(images, dtype=np.float64).reshape(-1, 3))
    dist = np.asarray(dist, dtype=np.float64)
    order = np.lexsort((shifts[:, 2], shifts[:, 1], shifts[:, 0], neighbour, dist, centre))
    centre, neighbour, shifts, dist = centre[order], neighbour[order], shifts[order], dist[order]
    if max_neighbors is not None and len(centre):
        keep = dist <= _kth_distance(centre, dist, max_neighbors, len(structure))[centre] + tie_tol
        centre, neighbour, shifts = centre[keep], neighbour[keep], shifts[keep]
    edge_index = np.stack([centre, neighbour]).astype(np.int64).reshape(2, -1)
    return edge_index, np.ascontiguousarray(shifts.reshape(-1, 3))


def _kth_distance(centre: np.ndarray, dist: np.ndarray, k: int, n_atoms: int) -> np.ndarray:
    """Distance of each centre's k-th nearest neighbour (+inf with fewer than k); edges sorted."""
    counts = np.bincount(centre, minlength=n_atoms)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    kth = np.full(n_atoms, np.inf)
    enough = counts >= k
    kth[enough] = dist[start[enough] + k - 1]
    return kth


def edge_vectors(
    pos: torch.Tensor,
    cell: torch.Tensor,
    edge_index: torch.Tensor | np.ndarray,
    shifts: torch.Tensor | np.ndarray,
    batch: torch.Tensor | None = None,
) -> torch.Tensor:
    """Edge vectors ``r_ij = pos[j] - pos[i] + shifts @ cell[batch[i]]`` in torch, differentiable.

    Parameters
    ----------
    pos : torch.Tensor, shape (n_atoms, 3)
        Cartesian positions, Å.
    cell : torch.Tensor, shape (n_graphs, 3, 3) or (3, 3)
        Lattice vectors as rows, Å.
    edge_index : shape (2, E), int
        ``[centre i, neighbour j]``.
    shifts : shape (E, 3)
        Image offsets in lattice-vector units; cast to ``pos.dtype``.
    batch : torch.Tensor, shape (n_atoms,), optional
        Graph of each atom; required when ``cell`` holds more than one lattice.

    Returns
    -------
    torch.Tensor, shape (E, 3)
        Edge vectors in Å; gradients flow to ``pos`` and ``cell``.

    """
    edge_index = torch.as_tensor(edge_index, dtype=torch.long, device=pos.device)
    shifts = torch.as_tensor(shifts, device=pos.device).to(pos.dtype)
    i, j = edge_index[0], edge_index[1]
    if cell.dim() == 2 or (cell.dim() == 3 and cell.shape[0] == 1 and batch is None):
        offset = shifts @ cell.reshape(3, 3)
    elif cell.dim() == 3:
        if batch is None:
            raise ValueError(f"cell holds {cell.shape[0]} lattices: pass batch (n_atoms,) to choose one")
        offset = torch.einsum("ek,ekl->el", shifts, cell[batch[i]])
    else:
        raise ValueError(f"cell must have shape (3, 3) or (n_graphs, 3, 3), got {tuple(cell.shape)}")
    return pos[j] - pos[i] + offset


def reciprocal_hkl(lattice_matrix: np.ndarray, g_max: float) -> np.ndarray:
    """All Miller indices ``(h, k, l) != 0`` with ``|G| <= g_max``, where ``G = hkl @ B``.

    Parameters
    ----------
    lattice_matrix : np.ndarray, shape (3, 3)
        Lattice vectors ``a_1, a_2, a_3`` as rows, Å.
    g_max : float
        Largest reciprocal vector length, Å^-1, physics convention ``B = 2π (L^-1)^T`` so ``a_i · b_j =
        2π δ_ij``.

    Returns
    -------
    np.ndarray, shape (R, 3), float64
        Integer-valued indices sorted by ``|G|``, ties broken lexicographically by (h, k, l). Exhaustive:
        since ``h = G · a_1 / 2π``, ``|h| <= floor(g_max |a_1| / 2π)`` and likewise for k, l.

    """
    lattice = np.asarray(lattice_matrix, dtype=np.float64).reshape(3, 3)
    if not np.isfinite(g_max) or g_max < 0:
        raise ValueError(f"g_max must be a non-negative number of 1/Å, got {g_max}")
    recip = 2 * np.pi * np.linalg.inv(lattice).T
    bounds = np.floor(g_max * np.linalg.norm(lattice, axis=1) / (2 * np.pi)).astype(int)
    axes = [np.arange(-b, b + 1) for b in bounds]
    hkl = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    hkl = hkl[np.any(hkl != 0, axis=1)]
    g = np.linalg.norm(hkl @ recip, axis=1)
    hkl, g = hkl[g <= g_max], g[g <= g_max]
    order = np.lexsort((hkl[:, 2], hkl[:, 1], hkl[:, 0], np.round(g, 9)))
    return hkl[order].astype(np.float64).reshape(-1, 3)
