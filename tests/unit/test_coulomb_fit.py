"""CoulombFit: J from (ij|P) and chol((P|Q)) equals pyscf's density-fitted J; other requests go to pyscf."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyscf")
from pyscf import df, dft, gto  # noqa: E402

from sciml.hamiltonian.scf.coulomb_fit import CoulombFit  # noqa: E402
from sciml.hamiltonian.scf.h0 import JFIT, fock_solver  # noqa: E402

WATER = [(8, (0.0, 0.0, 0.117)), (1, (0.0, 0.757, -0.469)), (1, (0.0, -0.757, -0.469))]


def _mol():
    return gto.M(atom=WATER, basis="def2-svp", unit="Angstrom", verbose=0)


def test_coulomb_matches_pyscf_density_fitting_for_any_density_stack():
    mol = _mol()
    ref, fit = df.DF(mol, auxbasis=JFIT), CoulombFit(mol, JFIT)
    dms = np.random.default_rng(0).normal(size=(3, mol.nao, mol.nao))  # not symmetric: J sees the symmetric part
    want = ref.get_jk(dms, hermi=0, with_k=False)[0]
    got, none = fit.get_jk(dms, hermi=0, with_k=False)
    assert none is None and got.shape == dms.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.abs(want).max())
    np.testing.assert_allclose(fit.get_jk(dms[1], with_k=False)[0], want[1], rtol=0, atol=1e-11 * np.abs(want).max())
    assert fit._cderi is None and fit.nbytes == fit._int3c.nbytes  # pyscf's factors were never built
    moved = mol.set_geom_(np.asarray(mol.atom_coords(unit="Angstrom")) * 1.05, unit="Angstrom", inplace=False)
    fit.reset(moved)  # a new geometry: the kept factors are dropped and rebuilt
    assert fit._int3c is None and fit.nbytes == 0
    np.testing.assert_allclose(fit.get_jk(dms[0], with_k=False)[0],
                               df.DF(moved, auxbasis=JFIT).get_jk(dms[0], with_k=False)[0], rtol=0, atol=1e-10)


def test_exchange_and_large_tensors_go_to_pyscf():
    mol = _mol()
    dm = dft.RKS(mol).get_init_guess(key="minao")
    fit = CoulombFit(mol, JFIT)
    vj, vk = fit.get_jk(dm, with_k=True)
    ref_j, ref_k = df.DF(mol, auxbasis=JFIT).get_jk(dm, with_k=True)
    np.testing.assert_allclose(vk, ref_k, rtol=0, atol=1e-12)
    np.testing.assert_allclose(vj, ref_j, rtol=0, atol=1e-12)
    tight = CoulombFit(mol, JFIT)
    tight.max_memory = 1e-3  # MB: the three-centre tensor does not fit, pyscf's (out-of-core capable) path builds
    np.testing.assert_allclose(tight.get_jk(dm, with_k=False)[0], ref_j, rtol=0, atol=1e-12)
    assert tight._int3c is None


def test_fast_h0_uses_it_only_without_exchange():
    mol = _mol()
    assert isinstance(fock_solver(mol, "pbe", method="fast").with_df, CoulombFit)
    assert not isinstance(fock_solver(mol, "b3lyp", method="fast").with_df, CoulombFit)
    assert not isinstance(fock_solver(mol, "hf", method="fast").with_df, CoulombFit)
