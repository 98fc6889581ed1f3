"""Invariance of crystal networks under the symmetries of a periodic structure.

``assert_invariant(net, structure, settings)`` checks, in the network's dtype, that the output is unchanged
by a random O(3) element (with parity), a random translation, a random atom permutation and a 2×2×2
supercell; tests add primitive ↔ conventional cells with :func:`assert_same_output`.
"""

from __future__ import annotations

import numpy as np
import torch
from pymatgen.core import Lattice, Structure
from torch_geometric.data import Batch

from sciml.crystal.data.graphs import GraphSettings, structure_to_graph


def random_orthogonal(rng: np.random.Generator, parity: bool = True) -> np.ndarray:
    """A Haar-random element of O(3) (of SO(3) when ``parity`` is False), shape (3, 3)."""
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] *= -1
    return -q if parity and rng.random() < 0.5 else q


def rotate(structure: Structure, q: np.ndarray) -> Structure:
    """Apply ``r → Q r`` to lattice vectors and Cartesian positions (fractional coordinates unchanged)."""
    lattice = structure.lattice.matrix @ q.T
    return Structure(Lattice(lattice), structure.species, structure.cart_coords @ q.T, coords_are_cartesian=True)


def translate(structure: Structure, shift: np.ndarray) -> Structure:
    """Shift every atom by the Cartesian vector ``shift`` (Å), without wrapping into the cell."""
    return Structure(structure.lattice, structure.species, structure.cart_coords + shift, coords_are_cartesian=True)


def permute(structure: Structure, perm: np.ndarray) -> Structure:
    """Reorder atoms by ``perm``."""
    return Structure(structure.lattice, [structure.species[i] for i in perm], structure.cart_coords[perm],
                     coords_are_cartesian=True)


def supercell(structure: Structure, scaling=(2, 2, 2)) -> Structure:
    """A supercell (``scaling`` as a 3-vector or 3×3 matrix)."""
    return structure.make_supercell(scaling, in_place=False)


def network_output(net: torch.nn.Module, structures: list[Structure], settings: GraphSettings) -> torch.Tensor:
    """Outputs of ``net`` for ``structures`` batched together, in the dtype of the network's parameters."""
    dtype = next(net.parameters()).dtype
    batch = Batch.from_data_list([structure_to_graph(s, settings, dtype=dtype) for s in structures])
    with torch.no_grad():
        return net(batch)


def assert_same_output(net, a: Structure, b: Structure, settings: GraphSettings, rtol: float, what: str) -> None:
    """Raise ``AssertionError`` naming ``what`` when ``net`` gives different outputs for ``a`` and ``b``."""
    out = network_output(net, [a, b], settings)
    scale = out[0].abs().clamp_min(1e-12)
    err = float(((out[0] - out[1]).abs() / scale).max())
    if not err <= rtol:
        raise AssertionError(f"{what}: relative difference {err:.3e} > {rtol:.1e} ({out.tolist()})")


def assert_invariant(net: torch.nn.Module, structure: Structure, settings: GraphSettings, rtol: float = 1e-8,
                     seed: int = 0) -> None:
    """Check rotation (with parity), translation, permutation and 2×2×2 supercell invariance of ``net``.

    Build ``net`` under ``torch.set_default_dtype(torch.float64)`` for tight tolerances (~1e-10).
    """
    rng = np.random.default_rng(seed)
    net.eval()
    checks = {
        "rotation": rotate(structure, random_orthogonal(rng)),
        "translation": translate(structure, rng.normal(size=3) * 3.0),
        "permutation": permute(structure, rng.permutation(len(structure))),
        "supercell 2x2x2": supercell(structure),
    }
    for what, transformed in checks.items():
        assert_same_output(net, structure, transformed, settings, rtol, what)
