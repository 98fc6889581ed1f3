"""Periodic path: a crystal module before training (its ridge alone) is E(3)-equivariant, H_ij(R) = H_ji(−R)ᵀ.

Synthetic 2-atom fcc crystals with random (but Hermitian-consistent) H0/H blocks, written as DeepH folders and
read by the data module (``sciml.hamiltonian.task.build``); rotation by a random O(3) element maps positions,
lattice and every block ``B → D_i B D_jᵀ`` (exact Wigner D, float64), so predictions must map the same way
(tolerance 1e-9 relative). The fixtures here are shared with ``test_hamiltonian_crystal_net.py``.
"""

from __future__ import annotations

import itertools

import numpy as np

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


RIDGE = {"lmax": 2, "lam": 1e-6, "centres": [1.5, 2.5, 3.5, 4.5], "width": 1.2}
NET = {"hidden": "8x0e+4x1o+4x1e+2x2e+2x2o", "lmax": 2, "n_layers": 1, "n_rbf": 8, "cutoff": 4.0,
       "radial_hidden": 16, "use_h0": True, "dtype": "float64"}


def crystal_config(root, structures, fractions=(0.5, 0.25, 0.25, 0.0), **model) -> dict:
    """Write ``structures`` as DeepH folders under ``root/data`` and return a tiny crystal config for them."""
    from sciml.hamiltonian.data.deeph import write_deeph

    for k, s in enumerate(structures):
        write_deeph(root / "data" / "Si" / f"{k:05d}", s, LAYOUT)
    return {"task": "hamiltonian", "seed": 0, "run_dir": str(root / "run"),
            "data": {"path": str(root / "data"), "split": {"fractions": list(fractions), "seed": 0},
                     "batch_size": 8, "cutoff": 4.0, "n_virtual": 2},
            "model": {"network": dict(NET), "ridge": dict(RIDGE), "loss": {"real": 1.0, "eig": 0.0}} | model,
            "calibration": {"callback": False},
            "trainer": {"max_epochs": 1, "accelerator": "cpu", "enable_progress_bar": False,
                        "enable_model_summary": False, "log_every_n_steps": 1}}


def predictor_of(module):
    from sciml.hamiltonian.artifact import HamiltonianPredictor

    return HamiltonianPredictor(module.eval(), None, module.layout, "x", "pbe", None, True, {})


def test_untrained_crystal_module_is_the_ridge_equivariant_and_hermitian(tmp_path):
    import torch

    from sciml.hamiltonian.bands import predict_crystal
    from sciml.hamiltonian.task import build

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    dm, module = build(crystal_config(tmp_path, [crystal(rng) for _ in range(4)], (1.0, 0.0, 0.0, 0.0)))
    assert dm.periodic and dm.split_sizes()["train"] == 4
    test = crystal(rng)
    predictor = predictor_of(module)
    pred = predict_crystal(test, predictor)
    scale = max(np.abs(b).max() for b in pred.blocks["H"].values())
    for (rx, ry, rz, i, j), block in pred.blocks["H"].items():
        assert np.allclose(block, pred.blocks["H"][(-rx, -ry, -rz, j, i)].T, atol=1e-12 * scale)
    assert any(np.abs(pred.blocks["H"][k] - test.blocks["H0"][k]).max() > 1e-3 * scale for k in pred.blocks["H"])
    # the read-out starts at zero, so this is H0 + ridge: closer to H = 1.1 H0 than H0 is (measured 0.05 vs 0.2)
    err = max(np.abs(pred.blocks["H"][k] - test.blocks["H"][k]).max() for k in pred.blocks["H"])
    assert err < 0.5 * max(np.abs(test.blocks["H0"][k] - test.blocks["H"][k]).max() for k in pred.blocks["H"])
    for parity in (False, True):
        q = -random_orthogonal(rng, parity=False) if parity else random_orthogonal(rng, parity=False)
        d = block_wigner(LAYOUT, [14], q).numpy()
        rotated = predict_crystal(rotate(test, q), predictor)
        err = max(np.abs(rotated.blocks["H"][k] - d @ b @ d.T).max() for k, b in pred.blocks["H"].items())
        assert err <= 1e-9 * scale, f"parity={parity}: {err:.2e}"


def with_check_bands(s: HamiltonianStructure, kpts) -> HamiltonianStructure:
    """The exact bands of H at ``kpts`` as the 'pyscf' reference (S is near identity, positive definite)."""
    from sciml.hamiltonian.periodic import structure_bands

    out = HamiltonianStructure(s.numbers, s.positions, s.lattice, dict(s.blocks), dict(s.meta))
    out.meta |= {"check_kpts": kpts.tolist(), "check_bands": structure_bands(out, LAYOUT, kpts).tolist()}
    return out


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
    from sciml.hamiltonian.periodic import kpath

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
