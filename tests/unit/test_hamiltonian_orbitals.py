"""Orbital layout: pyscf AO basis -> e3nn basis, checked by the rotation rule on exact pyscf matrices."""

import numpy as np
import pytest
import torch

from sciml.hamiltonian.harmonics import pyscf_harmonics, pyscf_to_e3nn_shell, sphere_points
from sciml.hamiltonian.orbitals import OrbitalLayout, block_wigner, wigner_D

WATER = "O 0.0 0.0 0.117; H 0.0 0.757 -0.469; H 0.05 -0.76 -0.47"


def _random_orthogonal(seed, proper=True):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if (np.linalg.det(q) > 0) != proper:
        q = -q
    return q


def _rotated_pair(basis, rot):
    gto = pytest.importorskip("pyscf.gto")
    mol = gto.M(atom=WATER, basis=basis, unit="Angstrom")
    coords = mol.atom_coords(unit="Angstrom")
    rotated = gto.M(atom=[(mol.atom_symbol(a), c) for a, c in enumerate(coords @ rot.T)], basis=basis,
                    unit="Angstrom")
    return mol, rotated


@pytest.mark.parametrize(("basis", "proper"), [("def2-svp", True), ("cc-pvtz", True), ("cc-pvtz", False)])
def test_rotation_rule_on_pyscf_integrals(basis, proper):
    rot = _random_orthogonal(1 if proper else 2, proper)
    mol, rotated = _rotated_pair(basis, rot)
    layout = OrbitalLayout.from_pyscf_mol(mol)
    numbers = [8, 1, 1]
    d = block_wigner(layout, numbers, rot).numpy()
    for integral in ("int1e_ovlp", "int1e_kin", "int1e_nuc"):
        a = layout.to_e3nn(mol.intor(integral), numbers)
        b = layout.to_e3nn(rotated.intor(integral), numbers)
        np.testing.assert_allclose(b, d @ a @ d.T, atol=1e-10, rtol=0)


def test_rotation_rule_on_hartree_fock_fock_matrix():
    scf = pytest.importorskip("pyscf.scf")
    rot = _random_orthogonal(3)
    mol, rotated = _rotated_pair("def2-svp", rot)
    layout = OrbitalLayout.from_pyscf_mol(mol)
    focks = []
    for m in (mol, rotated):
        mf = scf.RHF(m)
        mf.conv_tol, mf.conv_tol_grad = 1e-12, 1e-10
        mf.verbose = 0
        mf.kernel()
        focks.append(layout.to_e3nn(mf.get_fock(), [8, 1, 1]))
    d = block_wigner(layout, [8, 1, 1], rot).numpy()
    # grid-free HF: exact up to SCF convergence (orbital gradient < 1e-10 -> Fock error of that order)
    np.testing.assert_allclose(focks[1], d @ focks[0] @ d.T, atol=1e-9, rtol=0)


@pytest.mark.parametrize("l", [1, 2, 3, 4])
def test_closed_form_matches_pyscf_eval_gto(l):
    gto = pytest.importorskip("pyscf.gto")
    mol = gto.M(atom="H 0 0 0", basis={"H": [[l, [1.0, 1.0]]]}, spin=1, unit="Bohr")
    pts = sphere_points(40, seed=5)
    values = mol.eval_gto("GTOval_sph", pts)  # radial part is the same constant on the unit sphere
    closed = pyscf_harmonics(l, pts)
    scale = np.sum(values * closed) / np.sum(closed * closed)
    np.testing.assert_allclose(values, scale * closed, atol=1e-12 * abs(scale), rtol=0)


@pytest.mark.parametrize("l", range(6))
def test_wigner_d_is_an_exact_representation(l):
    q1, q2 = _random_orthogonal(4), _random_orthogonal(5, proper=False)
    d1, d2, d12 = wigner_D(l, q1), wigner_D(l, q2), wigner_D(l, q1 @ q2)
    eye = torch.eye(2 * l + 1, dtype=torch.float64)
    assert torch.allclose(d1 @ d1.T, eye, atol=1e-13, rtol=0)
    assert torch.allclose(d1 @ d2, d12, atol=1e-13, rtol=0)
    assert torch.allclose(wigner_D(l, -np.eye(3)), (-1) ** l * eye, atol=1e-13, rtol=0)
    t = pyscf_to_e3nn_shell(l)
    np.testing.assert_allclose(t @ t.T, np.eye(2 * l + 1), atol=1e-13)


def test_conversion_roundtrip_numpy_and_torch():
    layout = OrbitalLayout({8: (0, 0, 0, 1, 1, 2), 1: (0, 0, 1)})
    numbers = [8, 1, 1]
    m = np.random.default_rng(0).normal(size=(2, 24, 24))
    back = layout.to_pyscf(layout.to_e3nn(m, numbers), numbers)
    np.testing.assert_allclose(back, m, atol=1e-13)
    mt = torch.as_tensor(m, dtype=torch.float32)
    assert torch.allclose(layout.to_e3nn(mt, numbers), torch.as_tensor(layout.to_e3nn(m, numbers),
                                                                       dtype=torch.float32), atol=1e-5)
    assert list(layout.atom_offsets(numbers)) == [0, 14, 19, 24]
    assert layout.irreps(1) == "1x0e+1x0e+1x1o" and layout.irreps(8).endswith("1x1o+1x2e")
    with pytest.raises(ValueError, match="carry 24 orbitals"):
        layout.to_e3nn(np.zeros((23, 23)), numbers)


def test_labels_parse_and_unknown_element():
    gto = pytest.importorskip("pyscf.gto")
    mol = gto.M(atom=WATER, basis="def2-svp", unit="Angstrom")
    layout = OrbitalLayout.from_ao_labels([8, 1, 1], mol.ao_labels())
    assert layout.shells == {8: (0, 0, 0, 1, 1, 2), 1: (0, 0, 1)}
    assert OrbitalLayout.from_dict(layout.to_dict()) == layout
    with pytest.raises(ValueError, match="element Z=6 is not in the orbital basis"):
        layout.n_orbitals(6)


def test_pseudopotential_cell_keeps_nuclear_charge():
    pbc = pytest.importorskip("pyscf.pbc.gto")
    cell = pbc.M(atom="Si 0 0 0; Si 1.3575 1.3575 1.3575", a=np.eye(3) * 5.43, basis="gth-szv",
                 pseudo="gth-pbe", unit="Angstrom")
    layout = OrbitalLayout.from_pyscf_mol(cell)
    assert layout.shells == {14: (0, 1)}
