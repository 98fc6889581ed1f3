"""Periodic path: the closed-form model on crystal blocks is E(3)-equivariant and returns H_ij(R) = H_ji(−R)ᵀ.

Synthetic 2-atom fcc crystals with random (but Hermitian-consistent) H0/H blocks; rotation by a random O(3)
element maps positions, lattice and every block ``B → D_i B D_jᵀ`` (exact Wigner D, float64), so predictions
must map the same way (tolerance 1e-9 relative).
"""

from __future__ import annotations

import itertools

import numpy as np

from sciml.hamiltonian.crystal import CRYSTAL_RIDGE, fit_crystal_ridge, predict_crystal
from sciml.hamiltonian.orbitals import OrbitalLayout, block_wigner
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.testing import random_orthogonal

LAYOUT = OrbitalLayout({14: (0, 1)})
LATTICE = 2.7 * (np.ones((3, 3)) - np.eye(3))


def crystal(rng, lattice=LATTICE, positions=None) -> HamiltonianStructure:
    pos = positions if positions is not None else np.array([[0, 0, 0], [1.36, 1.36, 1.36]]) + rng.normal(
        scale=0.03, size=(2, 3))
    blocks = {"H0": {}, "H": {}, "S": {}}
    for r in itertools.product((-1, 0, 1), repeat=3):
        for i, j in itertools.product(range(2), repeat=2):
            if r > (0, 0, 0) or (r == (0, 0, 0) and i <= j):
                d = np.linalg.norm(pos[j] + np.array(r) @ lattice - pos[i])
                if d > 5.0:
                    continue
                h0 = rng.normal(size=(4, 4)) * np.exp(-d)
                h0 = 0.5 * (h0 + h0.T) if (r == (0, 0, 0) and i == j) else h0
                for name, m in (("H0", h0), ("H", 1.1 * h0), ("S", np.eye(4) if d == 0 else 0.1 * h0)):
                    blocks[name][(*r, i, j)] = m
                    blocks[name][(*(-v for v in r), j, i)] = m.T
    return HamiltonianStructure(np.array([14, 14]), pos, lattice, blocks, {"n_occupied": 4})


def rotate(s: HamiltonianStructure, q: np.ndarray) -> HamiltonianStructure:
    d = block_wigner(LAYOUT, [14], q).numpy()
    blocks = {n: {k: d @ b @ d.T for k, b in bl.items()} for n, bl in s.blocks.items()}
    return HamiltonianStructure(s.numbers, s.positions @ q.T + 1.3, s.lattice @ q.T, blocks, dict(s.meta))


def test_crystal_prediction_is_equivariant_and_hermitian():
    rng = np.random.default_rng(0)
    train = [crystal(rng) for _ in range(3)]
    ridge, nb, eb = fit_crystal_ridge(train, LAYOUT, {"lam": 1e-6})
    test = crystal(rng)
    pred = predict_crystal(ridge, test, LAYOUT, nb, eb)
    scale = max(np.abs(b).max() for b in pred.blocks["H"].values())
    for (rx, ry, rz, i, j), block in pred.blocks["H"].items():
        assert np.allclose(block, pred.blocks["H"][(-rx, -ry, -rz, j, i)].T, atol=1e-12 * scale)
    assert any(np.abs(pred.blocks["H"][k] - test.blocks["H0"][k]).max() > 1e-3 * scale for k in pred.blocks["H"])
    for parity in (False, True):
        q = -random_orthogonal(rng, parity=False) if parity else random_orthogonal(rng, parity=False)
        d = block_wigner(LAYOUT, [14], q).numpy()
        rotated = predict_crystal(ridge, rotate(test, q), LAYOUT, nb, eb)
        err = max(np.abs(rotated.blocks["H"][k] - d @ b @ d.T).max() for k, b in pred.blocks["H"].items())
        assert err <= 1e-9 * scale, f"parity={parity}: {err:.2e}"


def with_check_bands(s: HamiltonianStructure, kpts) -> HamiltonianStructure:
    """The exact bands of H at ``kpts`` as the 'pyscf' reference (S is near identity, positive definite)."""
    from sciml.hamiltonian.periodic import structure_bands

    out = HamiltonianStructure(s.numbers, s.positions, s.lattice, dict(s.blocks), dict(s.meta))
    out.meta |= {"check_kpts": kpts.tolist(), "check_bands": structure_bands(out, LAYOUT, kpts).tolist()}
    return out


def test_leave_one_out_band_calibrator_round_trips(tmp_path):
    """Scores are max-over-k band errors of refits without the structure; q_b is the ⌈(n+1)(1−α)⌉-th score."""
    import torch

    from sciml.hamiltonian.crystal_model import (
        band_radius,
        fit_band_calibrator,
        load_crystal_model,
        loo_band_scores,
        save_crystal_model,
    )
    from sciml.hamiltonian.periodic import structure_bands

    rng = np.random.default_rng(1)
    kpts = rng.random((3, 3))
    train = [with_check_bands(crystal(rng), kpts) for _ in range(3)]
    scores, groups = loo_band_scores(train, LAYOUT, {"lam": 1e-3})
    assert scores.shape == groups.shape == (3 * 8,)
    ridge, nb, eb = fit_crystal_ridge(train[1:], LAYOUT, {"lam": 1e-3})  # structure 0 held out, by hand
    b = structure_bands(predict_crystal(ridge, train[0], LAYOUT, nb, eb), LAYOUT, kpts)
    assert np.allclose(scores[:8], np.abs(b - np.asarray(train[0].meta["check_bands"])).max(axis=0), atol=1e-12)
    cal = fit_band_calibrator(train, LAYOUT, {"lam": 1e-3})
    per_band = scores.reshape(3, 8).max(axis=0)  # n = 3, alpha = 0.25: k = ⌈4 · 0.75⌉ = 3, the largest score
    assert np.allclose(band_radius(cal, 8, 0.25), per_band)
    assert np.isinf(band_radius(cal, 8, 0.1)).all()  # k = ⌈4 · 0.9⌉ = 4 > n
    save_crystal_model(tmp_path / "m", ridge, LAYOUT, CRYSTAL_RIDGE | {"lam": 1e-3}, {"n_structures": 3},
                       {"basis": "x"}, cal)
    model = load_crystal_model(tmp_path / "m")
    assert np.allclose(band_radius(model.calibrator, 8, 0.25), per_band) and model.generator == {"basis": "x"}
    assert all(torch.equal(v, model.ridge.state_dict()[k]) for k, v in ridge.state_dict().items())
    try:
        loo_band_scores(train[:1], LAYOUT)
    except ValueError as err:
        assert ">= 2 training crystals" in str(err)
    else:
        raise AssertionError("one structure must be refused")


def test_read_deeph_tree_merges_layouts(tmp_path):
    """Folders of different elements merge into one layout; one element with two bases is a clear error."""
    import pytest

    from sciml.hamiltonian.data.deeph import read_deeph_tree, write_deeph

    pytest.importorskip("h5py")
    rng = np.random.default_rng(2)
    si = crystal(rng)
    write_deeph(tmp_path / "a" / "Si", si, LAYOUT)
    s_only = OrbitalLayout({6: (0,)})
    c = HamiltonianStructure(np.array([6]), np.zeros((1, 3)), LATTICE,
                             {"H": {(0, 0, 0, 0, 0): np.array([[-0.5]])}}, {})
    write_deeph(tmp_path / "a" / "C", c, s_only)
    structures, layout = read_deeph_tree(tmp_path / "a", merge_layouts=True)
    assert layout.shells == {14: (0, 1), 6: (0,)} and len(structures) == 2
    write_deeph(tmp_path / "b" / "C1", c, s_only)
    c2 = HamiltonianStructure(np.array([6]), np.zeros((1, 3)), LATTICE, {"H": {(0, 0, 0, 0, 0): np.eye(2)}}, {})
    write_deeph(tmp_path / "b" / "C3", c2, OrbitalLayout({6: (0, 0)}))
    with pytest.raises(ValueError, match="element Z=6 has shells"):
        read_deeph_tree(tmp_path / "b", merge_layouts=True)


def test_kpath_lands_on_fcc_high_symmetry_points_for_rotated_cells():
    """fcc labelled points (Γ, X, W, K, L, U) have fractional coordinates in multiples of 1/8 of the primitive
    reciprocal basis and integers/halves of the conventional one, whatever the cell's orientation."""
    import pytest

    pytest.importorskip("pymatgen")
    from sciml.hamiltonian.crystal_predict import kpath

    a = 5.431
    prim = a / 2 * (np.ones((3, 3)) - np.eye(3))
    q = random_orthogonal(np.random.default_rng(4), parity=False)
    conv_frac = np.array([[0, 0, 0], [0, .5, .5], [.5, 0, .5], [.5, .5, 0], [.25, .25, .25], [.25, .75, .75],
                          [.75, .25, .75], [.75, .75, .25]])
    cells = [([14, 14], np.array([[0, 0, 0], [a / 4] * 3]) @ q.T, prim @ q.T),
             ([14] * 8, conv_frac @ (a * np.eye(3)) @ q.T, a * np.eye(3) @ q.T)]
    for numbers, pos, lat in cells:
        k, x, ticks = kpath(numbers, pos, lat, 30)
        at_ticks = np.array([k[np.argmin(np.abs(x - t))] for t, _ in ticks])
        assert np.allclose(8 * at_ticks, np.round(8 * at_ticks), atol=1e-6)
        assert "X" in [label for _, label in ticks]
