"""Periodic neighbour list, differentiable edge vectors and reciprocal-lattice enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from pymatgen.core import Lattice, Structure

from sciml.core.neighbors import edge_vectors, neighbor_list, reciprocal_hkl

PEROVSKITE_FRAC = [[0, 0, 0], [0.5, 0.5, 0.5], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]


def perovskite(a: float = 3.905) -> Structure:
    """Cubic SrTiO3-like 5-atom cell (many exact distance ties)."""
    return Structure(Lattice.cubic(a), ["Sr", "Ti", "O", "O", "O"], PEROVSKITE_FRAC)


def triclinic() -> Structure:
    """Four atoms in a low-symmetry triclinic cell, seeded."""
    lattice = Lattice.from_parameters(4.1, 5.3, 6.2, 78.0, 95.0, 112.0)
    return Structure(lattice, ["Si", "O", "O", "Al"], np.random.default_rng(0).random((4, 3)))


def small_cell() -> Structure:
    """Two atoms in a 2.5 Å cubic cell: a cutoff of 8 Å reaches many images."""
    return Structure(Lattice.cubic(2.5), ["Fe", "Fe"], [[0, 0, 0], [0.5, 0.5, 0.5]])


def slab() -> Structure:
    """Build a two-layer slab with 15 Å of vacuum along c."""
    c = 2.0 + 15.0
    return Structure(Lattice.tetragonal(3.0, c), ["Cu", "Cu"], [[0, 0, 0.1], [0.5, 0.5, 0.1 + 2.0 / c]])


CASES = {
    "triclinic": (triclinic, 6.0),
    "small": (small_cell, 8.0),
    "slab": (slab, 7.0),
    "perovskite": (perovskite, 6.0),
}


def edge_keys(i, j, shifts) -> list[tuple[int, ...]]:
    """``(i, j, s1, s2, s3)`` per edge, shifts rounded to integers."""
    return [(int(a), int(b), *np.rint(s).astype(int).tolist()) for a, b, s in zip(i, j, shifts, strict=True)]


def pymatgen_distances(s: Structure, cutoff: float) -> dict[tuple[int, ...], float]:
    """Map edge key to distance from pymatgen's own neighbour list."""
    c, n, images, dist = s.get_neighbor_list(cutoff)
    return dict(zip(edge_keys(c, n, images), dist, strict=True))


def lengths(s: Structure, edge_index, shifts) -> np.ndarray:
    """Edge lengths (Å) from :func:`edge_vectors` in float64."""
    pos = torch.tensor(s.cart_coords, dtype=torch.float64)
    cell = torch.tensor(s.lattice.matrix, dtype=torch.float64)
    return edge_vectors(pos, cell, edge_index, shifts).norm(dim=1).numpy()


@pytest.mark.parametrize("name", CASES)
def test_pairs_match_pymatgen(name):
    """The (i, j, shift) set equals pymatgen's, with no duplicates and no zero-distance self-pair."""
    make, cutoff = CASES[name]
    s = make()
    edge_index, shifts = neighbor_list(s, cutoff)
    assert edge_index.dtype == np.int64 and edge_index.shape[0] == 2
    assert shifts.dtype == np.float64 and shifts.shape == (edge_index.shape[1], 3)
    keys = edge_keys(edge_index[0], edge_index[1], shifts)
    assert len(set(keys)) == len(keys)
    assert set(keys) == set(pymatgen_distances(s, cutoff))
    assert not any(key[0] == key[1] and key[2:] == (0, 0, 0) for key in keys)  # no zero-distance self-pair


@pytest.mark.parametrize("name", CASES)
def test_edge_vectors_match_pymatgen_and_are_sorted(name):
    """Torch edge lengths equal pymatgen distances to 1e-10 Å; edges sorted by centre then distance."""
    make, cutoff = CASES[name]
    s = make()
    edge_index, shifts = neighbor_list(s, cutoff)
    reference = pymatgen_distances(s, cutoff)
    got = lengths(s, edge_index, shifts)
    expected = [reference[k] for k in edge_keys(edge_index[0], edge_index[1], shifts)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)
    assert np.all(np.diff(edge_index[0]) >= 0)
    for centre in np.unique(edge_index[0]):
        assert np.all(np.diff(got[edge_index[0] == centre]) >= -1e-9)


def test_small_cell_reaches_many_images():
    """A cutoff of 3x the cell edge reaches shifts of at least 3."""
    edge_index, shifts = neighbor_list(small_cell(), 8.0)
    assert np.abs(shifts).max() >= 3
    assert edge_index.shape[1] > 200


def test_isolated_atom_has_no_edges_and_does_not_raise():
    """An atom with no neighbour gets empty, well-shaped arrays; the caller decides."""
    s = Structure(Lattice.cubic(10.0), ["Ar"], [[0, 0, 0]])
    edge_index, shifts = neighbor_list(s, 5.0)
    assert edge_index.shape == (2, 0) and shifts.shape == (0, 3)


def test_bad_arguments_raise():
    """Non-positive cutoff or max_neighbors raise ValueError."""
    with pytest.raises(ValueError, match="cutoff"):
        neighbor_list(perovskite(), -1.0)
    with pytest.raises(ValueError, match="max_neighbors"):
        neighbor_list(perovskite(), 5.0, max_neighbors=0)


def test_gradients_flow_to_pos_and_cell():
    """Gradients of edge lengths reach pos and cell, finite, and pass gradcheck."""
    s = triclinic()
    edge_index, shifts = neighbor_list(s, 5.0)
    pos = torch.tensor(s.cart_coords, dtype=torch.float64, requires_grad=True)
    cell = torch.tensor(s.lattice.matrix, dtype=torch.float64, requires_grad=True)
    edge_vectors(pos, cell, edge_index, shifts).norm(dim=1).sum().backward()
    for grad in (pos.grad, cell.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    ei, sh = torch.as_tensor(edge_index), torch.as_tensor(shifts)
    assert torch.autograd.gradcheck(
        lambda p, c: edge_vectors(p, c, ei, sh).norm(dim=1),
        (pos.detach().requires_grad_(), cell.detach().requires_grad_()),
    )


def test_finite_difference_of_length_wrt_pos():
    """d|r|/dpos from autograd equals a central finite difference in float64."""
    s = triclinic()
    edge_index, shifts = neighbor_list(s, 5.0)
    pos = torch.tensor(s.cart_coords, dtype=torch.float64, requires_grad=True)
    cell = torch.tensor(s.lattice.matrix, dtype=torch.float64)
    e, atom, axis, h = 3, int(edge_index[1, 3]), 1, 1e-6
    r = edge_vectors(pos, cell, edge_index, shifts).norm(dim=1)[e]
    (analytic,) = torch.autograd.grad(r, pos)
    plus, minus = pos.detach().clone(), pos.detach().clone()
    plus[atom, axis] += h
    minus[atom, axis] -= h
    fd = (
        edge_vectors(plus, cell, edge_index, shifts).norm(dim=1)[e]
        - edge_vectors(minus, cell, edge_index, shifts).norm(dim=1)[e]
    ) / (2 * h)
    assert abs(float(analytic[atom, axis]) - float(fd)) < 1e-8


def test_batched_cells_pick_each_graph_lattice():
    """With (n_graphs, 3, 3) cells each edge uses its own graph's lattice."""
    a, b = perovskite(3.9), triclinic()
    (ea, sa), (eb, sb) = neighbor_list(a, 5.0), neighbor_list(b, 5.0)
    pos = torch.tensor(np.vstack([a.cart_coords, b.cart_coords]))
    cell = torch.tensor(np.stack([a.lattice.matrix, b.lattice.matrix]))
    batch = torch.tensor([0] * len(a) + [1] * len(b))
    edge_index = np.hstack([ea, eb + len(a)])
    vec = edge_vectors(pos, cell, edge_index, np.vstack([sa, sb]), batch)
    expected = np.concatenate([lengths(a, ea, sa), lengths(b, eb, sb)])
    np.testing.assert_allclose(vec.norm(dim=1).numpy(), expected, atol=1e-12)
    with pytest.raises(ValueError, match="batch"):
        edge_vectors(pos, cell, edge_index, np.vstack([sa, sb]))


def kept_distances(s: Structure, cutoff: float, k: int) -> list[list[float]]:
    """Per atom, the sorted distances of the edges kept with ``max_neighbors=k`` (rounded)."""
    edge_index, shifts = neighbor_list(s, cutoff, max_neighbors=k)
    d = lengths(s, edge_index, shifts)
    return [sorted(np.round(d[edge_index[0] == i], 6).tolist()) for i in range(len(s))]


def test_k_nearest_keeps_ties():
    """Neighbours tied with the k-th are all kept, and a sub-tolerance jiggle changes nothing."""
    s = perovskite()
    per_atom = kept_distances(s, 6.0, k=4)
    assert len(per_atom[1]) == 6  # Ti: 6 O at a/2, all tied with the 4th
    assert len(per_atom[0]) == 12  # Sr: 12 O at a/sqrt(2)
    # a perturbation far below tie_tol does not change the kept set
    jiggled = s.copy()
    jiggled.translate_sites([2], [1e-7, 0, 0], frac_coords=False)
    assert [len(x) for x in kept_distances(jiggled, 6.0, k=4)] == [len(x) for x in per_atom]


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("displacement", [0.0, 0.05])
def test_k_nearest_is_invariant_under_permutation(k, displacement):
    """Permuting atoms permutes the kept edge set and changes nothing else."""
    s = perovskite()
    rng = np.random.default_rng(1)
    s = Structure(
        s.lattice,
        s.species,
        s.cart_coords + displacement * rng.normal(size=(5, 3)),
        coords_are_cartesian=True,
    )
    perm = rng.permutation(len(s))
    permuted = Structure(s.lattice, [s.species[p] for p in perm], s.frac_coords[perm])
    ei, sh = neighbor_list(s, 6.0, max_neighbors=k)
    pe, ps = neighbor_list(permuted, 6.0, max_neighbors=k)
    mapped = edge_keys(perm[pe[0]], perm[pe[1]], ps)
    assert set(mapped) == set(edge_keys(ei[0], ei[1], sh))


@pytest.mark.parametrize("k", [1, 4, 8])
def test_k_nearest_is_invariant_under_supercell(k):
    """Each supercell atom keeps the same distances as its primitive image."""
    s = perovskite()
    s.translate_sites([1], [0.01, 0.02, 0.0])  # break some ties, keep others
    big = s.copy()
    big.make_supercell([2, 2, 2])
    prim, sup = kept_distances(s, 6.0, k), kept_distances(big, 6.0, k)
    for atom, frac in enumerate(big.frac_coords):
        image = np.mod(frac * 2, 1.0)
        delta = np.mod(s.frac_coords - image + 0.5, 1.0) - 0.5
        match = np.flatnonzero(np.all(np.abs(delta) < 1e-6, axis=1))
        assert len(match) == 1
        assert sup[atom] == prim[int(match[0])]


def test_reciprocal_hkl_matches_brute_force():
    """The exact range bound misses nothing a wide brute-force search finds (triclinic)."""
    lattice = Lattice.from_parameters(3.7, 4.9, 6.1, 81.0, 103.0, 117.0).matrix
    g_max = 3.5
    hkl = reciprocal_hkl(lattice, g_max)
    recip = 2 * np.pi * np.linalg.inv(lattice).T
    np.testing.assert_allclose(lattice @ recip.T, 2 * np.pi * np.eye(3), atol=1e-12)
    brute = np.array([h for h in itertools.product(range(-12, 13), repeat=3) if any(h)], dtype=float)
    brute = brute[np.linalg.norm(brute @ recip, axis=1) <= g_max]
    assert len(hkl) == len(brute) > 10
    assert {tuple(h) for h in hkl} == {tuple(h) for h in brute}
    g = np.linalg.norm(hkl @ recip, axis=1)
    assert np.all(g <= g_max) and np.all(np.diff(g) >= -1e-9)
    assert hkl.dtype == np.float64 and np.all(hkl == np.rint(hkl))


def test_reciprocal_hkl_edge_cases():
    """Empty result below the first shell, the six {100}, and a negative g_max."""
    assert reciprocal_hkl(np.eye(3) * 4.0, 0.1).shape == (0, 3)
    cubic = reciprocal_hkl(np.eye(3) * 4.0, 2 * np.pi / 4.0 + 1e-9)
    assert len(cubic) == 6  # the six {100} reflections, sorted lexicographically
    assert cubic[0].tolist() == [-1, 0, 0] and cubic[-1].tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="g_max"):
        reciprocal_hkl(np.eye(3), -1.0)
