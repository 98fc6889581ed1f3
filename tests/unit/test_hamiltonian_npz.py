"""HamiltonianStructure and the shared npz format: round trips, block layout, clear errors."""

from pathlib import Path

import numpy as np
import pytest

from sciml.hamiltonian.data.npz import read_npz, write_npz
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure

LAYOUT = OrbitalLayout({8: (0, 0, 0, 1, 1, 2), 1: (0, 0, 1)})
NUMBERS = [8, 1, 1]
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "hamiltonian" / "water_pbe_def2svp.npz"


def _conformers(n=3, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n):
        mats = {}
        for name in ("H", "H0", "S"):
            a = rng.normal(size=(24, 24))
            mats[name] = a + a.T
        pos = rng.normal(size=(3, 3))
        meta = {"n_occupied": 5, "energy": -76.0 - c, "scf_seconds": 1.0 + c, "basis": "def2-svp", "xc": "pbe"}
        out.append((pos, mats, meta))
    return out


def test_from_dense_blocks_and_back():
    pos, mats, meta = _conformers(1)[0]
    s = HamiltonianStructure.from_dense(NUMBERS, pos, mats, LAYOUT, meta)
    assert len(s.blocks["H"]) == 9 and s.blocks["H"][(0, 0, 0, 0, 1)].shape == (14, 5)
    assert s.edges().shape == (9, 5) and not s.is_periodic
    np.testing.assert_allclose(s.to_dense("S", LAYOUT, order="pyscf"), mats["S"], atol=1e-13)
    np.testing.assert_allclose(s.to_dense("S", LAYOUT), LAYOUT.to_e3nn(mats["S"], NUMBERS), atol=1e-13)
    s.check(LAYOUT)
    with pytest.raises(ValueError, match="different basis set"):
        s.check(OrbitalLayout({8: (0, 1), 1: (0,)}))
    with pytest.raises(KeyError, match="no 'X' blocks"):
        s.to_dense("X", LAYOUT)


def test_npz_roundtrip(tmp_path):
    structures = [HamiltonianStructure.from_dense(NUMBERS, p, m, LAYOUT, meta) for p, m, meta in _conformers()]
    path = write_npz(tmp_path / "w.npz", structures, LAYOUT)
    back, layout = read_npz(path)
    assert layout == LAYOUT and len(back) == 3
    for a, b in zip(structures, back, strict=True):
        np.testing.assert_array_equal(a.positions, b.positions)
        for name in ("H", "H0", "S"):
            np.testing.assert_allclose(a.to_dense(name, LAYOUT), b.to_dense(name, LAYOUT), atol=1e-13)
        assert b.meta["energy"] == a.meta["energy"] and b.meta["n_occupied"] == 5 and b.meta["basis"] == "def2-svp"
    assert not list(tmp_path.glob(".*tmp"))


def test_npz_errors(tmp_path):
    structures = [HamiltonianStructure.from_dense(NUMBERS, p, m, LAYOUT, meta) for p, m, meta in _conformers(2)]
    path = write_npz(tmp_path / "w.npz", structures, LAYOUT)
    data = dict(np.load(path))
    del data["overlap"]
    np.savez(tmp_path / "no_s.npz", **data)
    with pytest.raises(ValueError, match=r"no_s.npz has no 'overlap' array; regenerate with sciml data hamiltonian"):
        read_npz(tmp_path / "no_s.npz")
    assert len(read_npz(tmp_path / "no_s.npz", names=("H",))[0]) == 2
    data = dict(np.load(path))
    data["hamiltonian"] = data["hamiltonian"][:, :20, :20]
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError, match="hamiltonian has shape"):
        read_npz(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_npz(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="not a readable npz"):
        read_npz(tmp_path / "junk.npz")
    other = HamiltonianStructure.from_dense([8, 1], np.zeros((2, 3)), {}, LAYOUT)
    with pytest.raises(ValueError, match="same atoms"):
        write_npz(tmp_path / "x.npz", [structures[0], other], LAYOUT)


def test_shared_water_file_reads_and_matches_dense():
    if not SHARED.is_file():
        pytest.skip("shared Hamiltonian data not present")
    structures, layout = read_npz(SHARED)
    raw = np.load(SHARED)
    assert layout == LAYOUT and len(structures) == raw["positions_angstrom"].shape[0]
    np.testing.assert_allclose(structures[7].to_dense("H", layout, order="pyscf"), raw["hamiltonian"][7], atol=1e-13)
    assert structures[7].meta["n_occupied"] == int(raw["n_occupied"])
