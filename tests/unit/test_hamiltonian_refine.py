"""Self-consistent refinement of a predicted H (sciml.hamiltonian.refine) and the caching Fock solver.

Checked against pyscf's own fixed point on water (PBE/def2-SVP, the ``"fast"`` builder, ~3 s): a converged SCF
is left where it is, a start as far off as the SAD guess (H0) converges to it, and the caching solver builds the
same Fock matrices as the plain one. Anderson's weights are checked against their closed form.
"""

from __future__ import annotations

import numpy as np
import pytest

from sciml.hamiltonian.refine import anderson_weights, occupied_density, refine

WATER = (np.array([8, 1, 1]), np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.469], [0.0, -0.757, -0.469]]))


def test_anderson_weights_sum_to_one_and_minimise_the_mixed_residual():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 7))
    c = anderson_weights([a, b])
    # two residuals: c_a = <b, b - a> / |b - a|^2 minimises |c_a a + (1 - c_a) b|
    expected = (b @ (b - a)) / ((b - a) @ (b - a))
    assert c.sum() == pytest.approx(1.0, abs=1e-12) and c[0] == pytest.approx(expected, rel=1e-10)
    many = [rng.normal(size=7) for _ in range(4)]
    best = np.linalg.norm(sum(w * r for w, r in zip(anderson_weights(many), many, strict=True)))
    for _ in range(200):  # no other affine combination does better
        w = rng.normal(size=4)
        w /= w.sum()
        assert best <= np.linalg.norm(sum(x * r for x, r in zip(w, many, strict=True))) + 1e-12
    assert anderson_weights([a]) == pytest.approx([1.0])


def _water_solver(cache_mb: float):
    from pyscf import gto

    from sciml.hamiltonian.data.h0 import fock_solver

    numbers, pos = WATER
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    return fock_solver(mol, "pbe", method="fast", cache_mb=cache_mb)


def test_caching_solver_builds_the_same_fock_matrices():
    pytest.importorskip("pyscf")
    plain, cached = _water_solver(0.0), _water_solver(64.0)
    guess = plain.get_init_guess(key="minao")
    _, other = occupied_density(plain.get_fock(dm=guess), plain.get_ovlp(), 5)
    for dens in (guess, other, guess):  # the second and third builds replay the cached AO values
        np.testing.assert_allclose(cached.get_fock(dm=dens), plain.get_fock(dm=dens), rtol=0, atol=1e-10)
    assert cached._numint.cached_bytes > 0 and isinstance(cached.with_df._cderi, np.ndarray)
    from sciml.hamiltonian.data import numint_cache

    arena = cached._numint._arena
    numint_cache.release(cached)  # the values are dropped, the arena goes back to the pool ...
    assert cached._numint.cached_bytes == 0 and any(a is arena for a in numint_cache._POOL)
    np.testing.assert_allclose(cached.get_fock(dm=other), plain.get_fock(dm=other), rtol=0, atol=1e-10)
    assert cached._numint._arena is arena  # ... and the next pass takes it again
    tiny = _water_solver(1e-6)  # a grid that does not fit is evaluated anew each time, with the same result
    for dens in (guess, other):
        np.testing.assert_allclose(tiny.get_fock(dm=dens), plain.get_fock(dm=dens), rtol=0, atol=1e-10)
    assert tiny._numint.cached_bytes == 0


def test_refinement_converges_to_the_scf_and_keeps_a_converged_h():
    pytest.importorskip("pyscf")
    mf = _water_solver(64.0)
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    scf, s = mf.get_fock(), mf.get_ovlp()

    def fock(dens):
        return mf.get_fock(dm=dens)

    h0 = mf.get_fock(dm=mf.get_init_guess(key="minao"))
    start = np.abs(h0 - scf).mean()
    out = refine(h0, fock, s, 5, 10)
    assert out.steps == 10 and len(out.residuals) == 10
    assert np.abs(out.hamiltonian - scf).mean() < 1e-4 * start  # µHa-level from a start ~10 mHa off
    assert out.residuals[-1] < 1e-3 * out.residuals[0]
    np.testing.assert_allclose(out.hamiltonian, out.hamiltonian.T, rtol=0, atol=1e-14)
    kept = refine(scf, fock, s, 5, 3)  # at the fixed point the residual is pyscf's convergence level
    assert np.abs(kept.hamiltonian - scf).max() < 1e-6 and max(kept.residuals) < 1.0
    assert refine(h0, fock, s, 5, 0).hamiltonian is h0
    curve = refine(h0, fock, s, 5, 4, keep_history=True).history  # a run of k builds ends where step k of it is
    assert len(curve) == 4
    np.testing.assert_allclose(curve[1], refine(h0, fock, s, 5, 2).hamiltonian, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("steps", "beta", "depth", "match"), [(-1, 0.5, 6, "steps"), (2, 0.0, 6, "beta"),
                                                               (2, 0.5, 0, "depth")])
def test_refine_refuses_bad_settings(steps, beta, depth, match):
    eye = np.eye(2)
    with pytest.raises(ValueError, match=match):
        refine(eye, lambda d: eye, eye, 1, steps, beta, depth)


def test_refined_calibration_refuses_molecules_outside_the_calibration_split(tmp_path):
    from pathlib import Path

    from sciml.hamiltonian.refine_calibration import add_refine_calibration

    organic = Path(__file__).resolve().parents[2] / "checkpoints" / "organic-pbe-def2svp"
    if not organic.is_dir():
        pytest.skip("no shipped organic checkpoint")
    (tmp_path / "uracil.npz").write_bytes(b"")  # a held-out molecule: never calibrates
    with pytest.raises(ValueError, match="uracil are not calibration molecules"):
        add_refine_calibration(organic, tmp_path)
    with pytest.raises(ValueError, match="no .npz files"):
        add_refine_calibration(organic, tmp_path / "empty")


def test_refined_calibration_round_trip_and_bad_steps():
    import torch

    from sciml.hamiltonian.refine_calibration import RefinedCalibration
    from sciml.uq.mondrian import MondrianConformal

    groups = torch.arange(-2, 1).repeat(9)
    cal = MondrianConformal(score="absolute", alpha=0.1).fit(torch.linspace(0.01, 0.1, 27).double(), groups)
    again = RefinedCalibration.from_dict(RefinedCalibration(5, cal, ["a"]).to_dict())
    lo, hi = again.intervals(np.array([-1.0, -0.5, 0.1]), 2, 0.1)
    np.testing.assert_allclose(hi - lo, 2 * cal.threshold(torch.tensor([-2, -1, 0]), 0.1).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="steps"):
        RefinedCalibration.from_dict(RefinedCalibration(0, cal).to_dict())
