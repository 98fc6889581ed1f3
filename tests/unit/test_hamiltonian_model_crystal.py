"""Periodic path: the closed-form model on crystal blocks is E(3)-equivariant and returns H_ij(R) = H_ji(−R)ᵀ.

Synthetic 2-atom fcc crystals with random (but Hermitian-consistent) H0/H blocks; rotation by a random O(3)
element maps positions, lattice and every block ``B → D_i B D_jᵀ`` (exact Wigner D, float64), so predictions
must map the same way (tolerance 1e-9 relative).
"""

from __future__ import annotations

import itertools

import numpy as np

from sciml.hamiltonian.crystal import fit_crystal_ridge, predict_crystal
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
