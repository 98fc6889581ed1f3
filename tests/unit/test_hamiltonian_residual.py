"""SCF residual r(H) = mean |F[D(H)] − H| and its conformal H-MAE bound (sciml.hamiltonian.scf.residual).

The residual is checked against pyscf's own fixed point: a converged SCF made with the same Fock builder has
r ≈ 0 (its convergence threshold), H0 (the SAD guess) a large one, and a perturbation δ of the converged H
gives r growing linearly with |δ| (first order in δ: (χ − 1) δ). Needs pyscf (~2 s, water, def2-SVP).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sciml.hamiltonian.scf.residual import ResidualBound, scf_residual
from sciml.uq.quantile import conformal_rank

WATER = (np.array([8, 1, 1]), np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.469], [0.0, -0.757, -0.469]]))


def test_conformal_rank_and_quantile():
    assert conformal_rank(9, 0.1) == 9 and conformal_rank(19, 0.1) == 18 and conformal_rank(8, 0.1) == 9
    scores = {f"m{i}": [0.1 * i, 0.05 * i] for i in range(1, 10)}  # per molecule the largest ratio counts
    fitted = ResidualBound.fit(scores, alpha=0.1)
    assert fitted.scores == pytest.approx([0.1 * i for i in range(1, 10)])
    assert fitted.quantile() == pytest.approx(0.9) and fitted.bound(1000.0) == pytest.approx(900.0)
    assert fitted.quantile(0.5) == pytest.approx(0.5)  # rank ceil(10 * 0.5) = 5
    assert math.isinf(ResidualBound.fit({k: scores[k] for k in list(scores)[:8]}, 0.1).quantile())
    again = ResidualBound.from_dict(fitted.to_dict())
    assert again.scores == fitted.scores and again.molecules == fitted.molecules and again.alpha == 0.1


@pytest.mark.parametrize("bad", [{"alpha": 0.1, "scores": []}, {"alpha": 0.1, "scores": [1.0, float("nan")]},
                                 {"alpha": 0.1, "scores": [-1.0]}, {"scores": [1.0]}])
def test_bad_residual_file_is_refused(bad):
    with pytest.raises((ValueError, KeyError)):
        ResidualBound.from_dict(bad)


def test_fit_refuses_bad_ratios_and_alpha():
    with pytest.raises(ValueError, match="m1"):
        ResidualBound.fit({"m0": [1.0], "m1": [float("inf")]})
    with pytest.raises(ValueError, match="alpha"):
        ResidualBound.fit({"m0": [1.0]}, alpha=1.5)


def _converged_water():
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver

    numbers, pos = WATER
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    mf = fock_solver(mol, "pbe", method="fast")
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    return mf


def test_residual_vanishes_at_self_consistency_and_grows_with_the_error():
    pytest.importorskip("pyscf")
    mf = _converged_water()
    numbers, pos = WATER
    h = mf.get_fock()
    at_scf = scf_residual(numbers, pos, h, "def2-svp", "pbe", h0="fast")
    h0 = mf.get_fock(dm=mf.get_init_guess(key="minao"))
    at_h0 = scf_residual(numbers, pos, h0, "def2-svp", "pbe", h0="fast")
    assert at_scf < 1.0 < 1000.0 < at_h0  # µHa: pyscf's convergence vs the SAD guess's distance from it
    delta = np.random.default_rng(0).normal(size=h.shape)
    delta = 1e-3 * (delta + delta.T) / 2
    small, large = (scf_residual(numbers, pos, h + t * delta, "def2-svp", "pbe", h0="fast") for t in (0.5, 1.0))
    assert small > 100 * at_scf and large / small == pytest.approx(2.0, rel=0.05)  # linear in the error


def test_residual_refuses_a_matrix_of_the_wrong_size():
    pytest.importorskip("pyscf")
    numbers, pos = WATER
    with pytest.raises(ValueError, match="24 orbitals"):
        scf_residual(numbers, pos, np.zeros((5, 5)), "def2-svp", "pbe", h0="fast")
