"""Periodic neighbour list, differentiable edge vectors and reciprocal-lattice enumeration."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pymatgen.core import Lattice, Structure

from sciml.data.neighbors import edge_vectors, neighbor_list, reciprocal_hkl

PEROVSKITE_FRAC = [[0, 0, 0], [0.5, 0.5, 0.5], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]


def perovskite(a: float = 3.905) -> Structure:
    """Cubic SrTiO3-like 5-atom cell."""
    return Structure(Lattice.cubic(a), ["Sr", "Ti", "O", "O", "O"], PEROVSKITE_FRAC)


def triclinic() -> Structure:
    """Four atoms in a low-symmetry triclinic cell, seeded."""
    rng = np.random.default_rng(0)
    lattice = Lattice.from_parameters(4.1, 5.3, 6.2, 78.0, 95.0, 112.0)
    return Structure(lattice, ["Si", "O", "O", "Al"], rng.random((4, 3)))


def small_cell() -> Structure:
    """Two atoms in a 2.5 Å cubic cell: a cutoff of 8 Å reaches many images."""
    return Structure(Lattice.cubic(2.5), ["Fe", "Fe"], [[0, 0, 0], [0.5, 0.5, 0.5]])


def slab() -> Structure:
    """A two-layer slab with 15 Å of vacuum along c."""
    a, thickness = 3.0, 2.0
    c = thickness + 15.0
    frac = [[0, 0, 0.1], [0.5, 0.5, 0.1 + thickness / c]]
    return Structure(Lattice.tetragonal(a, c), ["Cu", "Cu"], frac)


CASES = {
    "triclinic": (triclinic, 6.0),
    "small": (small_cell, 8.0),
    "slab": (slab, 7.0),
    "perovskite": (perovskite, 6.0),
}


def pair_set(i, j, shifts) -> set[tuple]:
    return {(int(a), int(b), *np.rint(s).astype(int).tolist()) for a, b, s in zip(i, j, shifts, strict=True)}


@pytest.mark.parametrize("name", CASES)
def test_pairs_match_pymatgen(name):
    make, cutoff = CASES[name]
    s = make()
    edge_index, shifts = neighbor_list(s, cutoff)
    assert edge_index.dtype == np.int64 and edge_index.shape[0] == 2
    assert shifts.dtype == np.float64 and shifts.shape == (edge_index.shape[1], 3)
    c, n, images, _ = s.get_neighbor_list(cutoff)
    ours = pair_set(edge_index[0], edge_index[1], shifts)
    assert len(ours) == edge_index.shape[1]  # no duplicate edges
    assert ours == pair_set(c, n, images)


@pytest.mark.parametrize("name", CASES)
def test_edge_vectors_match_pymatgen_distances(name):
    make, cutoff = CASES[name]
    s = make()
    edge_index, shifts = neighbor_list(s, cutoff)
    pos = torch.tensor(s.cart_coords, dtype=torch.float64)
    cell = torch.tensor(s.lattice.matrix, dtype=torch.float64)
    vec = edge_vectors(pos, cell, edge_index, shifts)
    lengths = vec.norm(dim=1).numpy()
    expected = {k: d for *k, d in zip(*s.get_neighbor_list(cutoff)[:2], map(tuple, s.get_neighbor_list(cutoff)[2]),
                                        s.get_neighbor_list(cutoff)[3], strict=True)} if False else None
    del expected
    c, n, images, dist = s.get_neighbor_list(cutoff)
    lookup = {(int(a), int(b), *np.rint(im).astype(int).tolist()): d for a, b, im, d in zip(c, n, images, dist,
                                                                                             strict=True)}
    keys = pair_set(edge_index[0], edge_index[1], shifts)
    ordered = [(int(a), int(b), *np.rint(sh).astype(int).tolist()) for a, b, sh in zip(*edge_index, shifts,
                                                                                          strict=True)]
    assert set(ordered) == keys
    np.testing.assert_allclose(lengths, [lookup[k] for k in ordered], rtol=0, atol=1e-10)
    # sorted by centre, then distance
    assert np.all(np.diff(edge_index[0]) >= 0)
    for centre in np.unique(edge_index[0]):
        assert np.all(np.diff(lengths[edge_index[0] == centre]) >= -1e-12)
