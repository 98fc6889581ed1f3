"""DeepH folder layout: round trip in every orbital order, units, atomic writes, clear errors."""

import json

import numpy as np
import pytest

pytest.importorskip("h5py")

from sciml.hamiltonian.data.deeph import HARTREE_EV, openmx_permutation, read_deeph, read_deeph_tree, write_deeph
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure

LAYOUT = OrbitalLayout({14: (0, 0, 1, 1, 2), 6: (0, 1, 3)})


def _crystal(seed=0):
    rng = np.random.default_rng(seed)
    numbers = np.array([14, 6])
    n = [LAYOUT.n_orbitals(z) for z in numbers]
    keys = [(rx, 0, 0, i, j) for rx in (-1, 0, 1) for i in range(2) for j in range(2)]
    blocks = {name: {k: rng.normal(size=(n[k[3]], n[k[4]])) for k in keys} for name in ("H", "H0", "S")}
    lattice = np.array([[0.0, 2.2, 2.2], [2.2, 0.0, 2.2], [2.2, 2.2, 0.0]])
    return HamiltonianStructure(numbers, rng.normal(size=(2, 3)), lattice, blocks,
                                {"n_occupied": 4, "energy": np.float64(-7.5), "kmesh": (2, 2, 2)})


@pytest.mark.parametrize("order", ["openmx", "pyscf", "e3nn"])
def test_roundtrip(tmp_path, order):
    s = _crystal()
    write_deeph(tmp_path / "si", s, LAYOUT, order=order)
    back, layout = read_deeph(tmp_path / "si")
    assert layout == LAYOUT
    np.testing.assert_allclose(back.lattice, s.lattice, atol=0)
    np.testing.assert_allclose(back.positions, s.positions, atol=0)
    for name in ("H", "H0", "S"):
        assert set(back.blocks[name]) == set(s.blocks[name])
        for k, v in s.blocks[name].items():
            np.testing.assert_allclose(back.blocks[name][k], v, atol=1e-13)
    info = json.loads((tmp_path / "si" / "info.json").read_text())
    assert info["orbital_order"] == order and info["energy_unit"] == "Hartree" and info["meta"]["energy"] == -7.5
    assert (tmp_path / "si" / "orbital_types.dat").read_text() == "0 0 1 1 2\n0 1 3\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_openmx_order_is_a_permutation_of_pyscf(tmp_path):
    # DeepH/OpenMX order from pyscf: p [0,1,2]; d [2,4,0,3,1]; f [3,4,2,5,1,6,0] (docs/formats.md)
    assert openmx_permutation(1).tolist() == [0, 1, 2]
    assert openmx_permutation(2).tolist() == [2, 4, 0, 3, 1]
    assert openmx_permutation(3).tolist() == [3, 4, 2, 5, 1, 6, 0]
    s = _crystal()
    write_deeph(tmp_path / "a", s, LAYOUT, order="pyscf")
    write_deeph(tmp_path / "b", s, LAYOUT, order="openmx")
    import h5py

    key = "[1, 0, 0, 1, 2]"
    with h5py.File(tmp_path / "a" / "hamiltonians.h5") as a, h5py.File(tmp_path / "b" / "hamiltonians.h5") as b:
        pa, pb = a[key][()], b[key][()]
    rows = np.r_[0, 1, 2:5, 5:8, 8 + openmx_permutation(2)]
    cols = np.r_[0, 1:4, 4 + openmx_permutation(3)]
    np.testing.assert_allclose(pb, pa[np.ix_(rows, cols)], atol=1e-13)


def test_ev_units_molecule_and_tree(tmp_path):
    s = _crystal()
    s.lattice = None
    s.blocks = {n: {k: v for k, v in b.items() if k[:3] == (0, 0, 0)} for n, b in s.blocks.items()}
    write_deeph(tmp_path / "root" / "m1", s, LAYOUT)
    info_path = tmp_path / "root" / "m1" / "info.json"
    info = json.loads(info_path.read_text())
    del info["energy_unit"]  # DeepH's own files are in eV
    info_path.write_text(json.dumps(info))
    back, _ = read_deeph(tmp_path / "root" / "m1")
    assert back.lattice is None and not (tmp_path / "root" / "m1" / "lat.dat").exists()
    k = (0, 0, 0, 0, 1)
    np.testing.assert_allclose(back.blocks["H"][k], s.blocks["H"][k] / HARTREE_EV, atol=1e-13)
    np.testing.assert_allclose(back.blocks["S"][k], s.blocks["S"][k], atol=1e-13)
    structures, layout = read_deeph_tree(tmp_path / "root")
    assert len(structures) == 1 and layout == LAYOUT


def test_errors(tmp_path):
    write_deeph(tmp_path / "si", _crystal(), LAYOUT)
    with pytest.raises(ValueError, match="Z=6 has shells .* the basis set differs"):
        read_deeph(tmp_path / "si", OrbitalLayout({14: (0, 0, 1, 1, 2), 6: (0, 1)}))
    with pytest.raises(ValueError, match="Z=6 is not in the orbital basis"):
        read_deeph(tmp_path / "si", OrbitalLayout({14: (0, 0, 1, 1, 2), 8: (0, 1)}))
    (tmp_path / "si" / "element.dat").unlink()
    with pytest.raises(FileNotFoundError, match="has no element.dat"):
        read_deeph(tmp_path / "si")
    with pytest.raises(FileNotFoundError, match="no DeepH folders"):
        read_deeph_tree(tmp_path / "empty")
    with pytest.raises(ValueError, match="order must be one of"):
        write_deeph(tmp_path / "x", _crystal(), LAYOUT, order="orca")


def test_failed_write_keeps_previous_folder(tmp_path):
    s = _crystal()
    write_deeph(tmp_path / "si", s, LAYOUT)
    bad = _crystal(1)
    bad.blocks["H"][(0, 0, 0, 0, 0)] = np.zeros((2, 2))  # wrong shape: refused before anything is swapped in
    with pytest.raises(ValueError, match="different basis set"):
        write_deeph(tmp_path / "si", bad, LAYOUT)
    back, _ = read_deeph(tmp_path / "si")
    np.testing.assert_allclose(back.blocks["H"][(0, 0, 0, 0, 0)], s.blocks["H"][(0, 0, 0, 0, 0)], atol=1e-13)
