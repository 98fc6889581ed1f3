"""Self-consistent refinement of a predicted H (sciml.hamiltonian.scf.refine) and its Fock builds.

Checked against pyscf's own fixed point on water (PBE/def2-SVP, the ``"fast"`` builder, ~3 s): a converged SCF
is left where it is, a start as far off as the SAD guess (H0) converges to it (Newton steps superlinearly), cached AO
values give the same Fock matrices, and the two-grid builds (sciml.hamiltonian.scf.two_grid) meet their defining
identities and land near the fine fixed point. Anderson's weights are checked against their closed form, the density
response against finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

from sciml.hamiltonian.scf.refine import (
    NEWTON_TOL,
    anderson_weights,
    density_matrix,
    density_response,
    refine,
    solver_response,
)

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


def _water_solver(keep_factors: bool = False):
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver

    numbers, pos = WATER
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    return fock_solver(mol, "pbe", method="fast", keep_factors=keep_factors)


def test_cached_ao_values_give_the_same_fock_matrices():
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.scf import numint_cache

    plain, cached = _water_solver(), _water_solver(keep_factors=True)
    cached._numint = numint_cache.CachedNumInt(64.0)
    guess = plain.get_init_guess(key="minao")
    other = density_matrix(plain.get_fock(dm=guess), plain.get_ovlp(), 5)
    for dens in (guess, other, guess):  # the second and third builds replay the cached AO values
        np.testing.assert_allclose(cached.get_fock(dm=dens), plain.get_fock(dm=dens), rtol=0, atol=1e-10)
    assert cached._numint.cached_bytes > 0 and cached.with_df.nbytes > 0
    arena = cached._numint._arena
    numint_cache.release(cached)  # the values are dropped, the arena goes back to the pool ...
    assert cached._numint.cached_bytes == 0 and any(a is arena for a in numint_cache._POOL)
    np.testing.assert_allclose(cached.get_fock(dm=other), plain.get_fock(dm=other), rtol=0, atol=1e-10)
    assert cached._numint._arena is arena  # ... and the next pass takes it again
    tiny = _water_solver()
    tiny._numint = numint_cache.CachedNumInt(1e-6)  # a grid that does not fit is evaluated anew, same result
    for dens in (guess, other):
        np.testing.assert_allclose(tiny.get_fock(dm=dens), plain.get_fock(dm=dens), rtol=0, atol=1e-10)
    assert tiny._numint.cached_bytes == 0


def test_two_grid_builds_equal_h0_at_its_density_and_differ_by_the_grid_correction():
    """F̃[D] − F_f[D] = δ(D_0) − δ(D) with δ = F_f − F_c: exact at D_0, and the same identity elsewhere."""
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    fine = _water_solver(keep_factors=True)
    d0 = fine.get_init_guess(key="minao")
    h0 = fine.get_fock(dm=d0)
    builds = TwoGridFock(fine, h0, d0, cache_mb=64.0)
    assert builds.corrected and builds.nbytes == fine.with_df.nbytes > 0  # nothing on the coarse grid yet
    np.testing.assert_allclose(builds(d0), h0, rtol=0, atol=1e-10)
    coarse = builds._coarse
    assert coarse.grids.weights.size < fine.grids.weights.size and coarse.with_df is fine.with_df
    assert builds.nbytes > fine.with_df.nbytes  # the coarse AO values are kept
    other = density_matrix(h0, fine.get_ovlp(), 5)
    delta = lambda d: fine.get_fock(dm=d) - coarse.get_fock(dm=d)  # noqa: E731
    np.testing.assert_allclose(builds(other) - fine.get_fock(dm=other), delta(d0) - delta(other), rtol=0,
                               atol=1e-10)
    builds.release()
    assert builds._coarse is None and builds.nbytes == fine.with_df.nbytes > 0
    level0 = _water_solver()
    level0.grids.level = 0  # no finer than the coarse grid: the fine solver builds directly
    direct = TwoGridFock(level0, h0, d0, cache_mb=64.0)
    assert not direct.corrected
    np.testing.assert_allclose(direct(other), level0.get_fock(dm=other), rtol=0, atol=1e-12)


def _converged_water():
    mf = _water_solver(keep_factors=True)
    mf.conv_tol = 1e-12
    mf.kernel()
    assert mf.converged
    return mf


@pytest.mark.parametrize("method", ["newton", "newton-xc", "anderson"])
def test_refinement_converges_to_the_scf_and_keeps_a_converged_h(method):
    pytest.importorskip("pyscf")
    mf = _converged_water()
    scf, s = mf.get_fock(), mf.get_ovlp()

    def fock(dens):
        return mf.get_fock(dm=dens)

    def run(h, steps, **kw):
        return refine(h, fock, s, 5, steps, method, response=lambda c, n, k: solver_response(mf, c, n, k), **kw)

    h0 = mf.get_fock(dm=mf.get_init_guess(key="minao"))
    start = np.abs(h0 - scf).mean()
    out = run(h0, 10)
    assert out.steps == 10 and len(out.residuals) == 10 and out.method == method
    assert np.abs(out.hamiltonian - scf).mean() < 1e-4 * start  # µHa-level from a start ~10 mHa off
    assert out.residuals[-1] < 1e-3 * out.residuals[0]
    np.testing.assert_allclose(out.hamiltonian, out.hamiltonian.T, rtol=0, atol=1e-14)
    kept = run(scf, 3)  # at the fixed point the residual is pyscf's convergence level
    assert np.abs(kept.hamiltonian - scf).max() < 1e-6 and max(kept.residuals) < 1.0
    assert run(h0, 0).hamiltonian is h0
    curve = run(h0, 4, keep_history=True).history  # a run of k builds ends where step k of it is
    assert len(curve) == 4
    np.testing.assert_allclose(curve[1], run(h0, 2).hamiltonian, rtol=0, atol=1e-12)


def test_newton_steps_converge_faster_than_anderson_and_superlinearly_with_the_whole_kernel():
    """With the exact kernel a step leaves its linear solve's tolerance of the error, plus O(error²); with the
    Coulomb kernel alone, what the XC kernel would have taken (water: 0.05–0.15 of the error per build)."""
    pytest.importorskip("pyscf")
    mf = _converged_water()
    scf, s = mf.get_fock(), mf.get_ovlp()
    h0 = mf.get_fock(dm=mf.get_init_guess(key="minao"))
    errors = {}
    for method in ("newton", "newton-xc", "anderson"):
        out = refine(h0, lambda d: mf.get_fock(dm=d), s, 5, 4, method,
                     response=lambda c, n, k: solver_response(mf, c, n, k), keep_history=True)
        errors[method] = [np.abs(h - scf).mean() for h in [h0, *out.history]]
        assert (out.products > 0) == (method != "anderson")
    exact, coulomb, anderson = errors["newton-xc"], errors["newton"], errors["anderson"]
    assert all(after <= 2 * NEWTON_TOL * before for before, after in zip(exact[2:], exact[3:], strict=False))
    assert exact[4] < 1e-6 * exact[0] and exact[2] < 1e-2 * anderson[2]
    assert all(after <= 0.25 * before for before, after in zip(coulomb, coulomb[1:], strict=False))
    assert coulomb[4] < 0.2 * anderson[4]


def test_density_response_is_the_derivative_of_the_density():
    """χ₀[v] = (D(H + t v) − D(H − t v)) / 2t to O(t²), for a symmetric v."""
    pytest.importorskip("pyscf")
    from scipy.linalg import eigh

    mf = _converged_water()
    h, s = mf.get_fock(), mf.get_ovlp()
    rng = np.random.default_rng(0)
    v = rng.normal(scale=1e-2, size=h.shape)
    v = v + v.T
    t = 1e-4
    numeric = (density_matrix(h + t * v, s, 5) - density_matrix(h - t * v, s, 5)) / (2 * t)
    analytic = density_response(*eigh(h, s), 5)(v)
    np.testing.assert_allclose(analytic, numeric, rtol=0, atol=1e-6 * np.abs(numeric).max())


def test_two_grid_refinement_lands_within_the_change_of_the_grid_correction():
    """The two-grid fixed point H̃ solves H̃ = F_f[D̃] + δ(D_0) − δ(D̃): off the fine one by about that change."""
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    mf = _water_solver(keep_factors=True)
    mf.conv_tol = 1e-12
    mf.kernel()
    scf, s = mf.get_fock(), mf.get_ovlp()
    d0 = mf.get_init_guess(key="minao")
    h0 = mf.get_fock(dm=d0)
    builds = TwoGridFock(mf, h0, d0, cache_mb=64.0)
    out = refine(h0, builds, s, 5, 15)
    assert out.residuals[-1] < 1e-3 * out.residuals[0]  # converged on the two-grid map
    d_scf = density_matrix(scf, s, 5)
    coarse = builds._coarse
    change = np.abs((h0 - coarse.get_fock(dm=d0)) - (scf - coarse.get_fock(dm=d_scf))).mean()
    off = np.abs(out.hamiltonian - scf).mean()  # water: 30 µHa, the change 27 µHa, H0 16 mHa off
    assert 0 < off <= 2 * change and off < 1e-2 * np.abs(h0 - scf).mean()


def test_two_grid_builds_go_one_level_down_and_keep_a_converged_full_h0_scf():
    """The water model's H0 (exact Coulomb, grid 3): builds on level 2 leave its converged SCF where it is."""
    pytest.importorskip("pyscf")
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    numbers, pos = WATER
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    mf = fock_solver(mol, "pbe", 3, "full")
    mf.conv_tol = 1e-12
    mf.kernel()
    scf, s = mf.get_fock(), mf.get_ovlp()
    d0 = mf.get_init_guess(key="minao")
    builds = TwoGridFock(mf, mf.get_fock(dm=d0), d0, cache_mb=64.0)
    assert builds.level == 2 and builds.corrected
    out = refine(scf, builds, s, 5, 5)
    assert np.abs(out.hamiltonian - scf).mean() < 1e-7  # 0.03 µHa (level 0 would drift ~30 µHa)


@pytest.mark.parametrize(("steps", "method", "beta", "depth", "match"), [
    (-1, "anderson", 0.5, 6, "steps"), (2, "anderson", 0.0, 6, "beta"), (2, "anderson", 0.5, 0, "depth"),
    (2, "broyden", 0.5, 6, "unknown refinement method 'broyden'"), (2, "newton", 0.5, 6, "pass response="),
    (2, "newton-xc", 0.5, 6, "pass response=")])
def test_refine_refuses_bad_settings(steps, method, beta, depth, match):
    eye = np.eye(2)
    with pytest.raises(ValueError, match=match):
        refine(eye, lambda d: eye, eye, 1, steps, method, beta=beta, depth=depth)


def test_refined_calibration_refuses_molecules_outside_the_calibration_split(tmp_path):
    from pathlib import Path

    from sciml.hamiltonian.calibrate import add_refine_calibration

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

    from sciml.hamiltonian.scf.refine_calibration import RefinedCalibration
    from sciml.uq.mondrian import MondrianConformal

    groups = torch.arange(-2, 1).repeat(9)
    cal = MondrianConformal(score="absolute", alpha=0.1).fit(torch.linspace(0.01, 0.1, 27).double(), groups)
    eps, change = np.array([-1.0, -0.5, 0.1]), np.array([1e-3, -2e-3, 0.0])
    q = cal.threshold(torch.tensor([-2, -1, 0]), 0.1).numpy()
    again = RefinedCalibration.from_dict(RefinedCalibration(5, cal, ["a"]).to_dict())
    lo, hi = again.intervals(eps, change, 2, 0.1)  # absolute score: the change plays no part
    np.testing.assert_allclose(hi - lo, 2 * q, rtol=1e-12)
    scaled = RefinedCalibration.from_dict(RefinedCalibration(5, cal, ["a"], floor=5e-4).to_dict())
    lo, hi = scaled.intervals(eps, change, 2, 0.1)
    np.testing.assert_allclose(hi - lo, 2 * q * (np.abs(change) + 5e-4), rtol=1e-12)
    np.testing.assert_allclose(lo + hi, 2 * eps, rtol=1e-12)
    with pytest.raises(ValueError, match="steps"):
        RefinedCalibration.from_dict(RefinedCalibration(0, cal).to_dict())
    with pytest.raises(ValueError, match="floor"):
        RefinedCalibration.from_dict(RefinedCalibration(5, cal, floor=0.0).to_dict())
    assert again.method == "newton"  # a file without the field was fitted with Anderson steps, which it names
    older = {k: v for k, v in again.to_dict().items() if k != "method"}
    assert RefinedCalibration.from_dict(older).method == "anderson"
    with pytest.raises(ValueError, match="unknown refinement method"):
        RefinedCalibration.from_dict(again.to_dict() | {"method": "broyden"})


def test_core_orbitals_get_their_own_refined_group():
    import torch

    from sciml.hamiltonian.scf.refine_calibration import CORE_GROUP, RefinedCalibration, core_orbitals, refined_groups
    from sciml.uq.mondrian import MondrianConformal

    assert core_orbitals([8, 1, 1]) == 1 and core_orbitals([6, 6, 7, 1]) == 3 and core_orbitals([1, 1]) == 0
    groups = refined_groups(7, 5, 2)  # lowest 2 of 5 occupied are core; HOMO -1, LUMO 0
    assert groups.tolist() == [CORE_GROUP, CORE_GROUP, -3, -2, -1, 0, 1]
    # a core group with wide scores widens exactly the core orbitals; valence keep their group's width
    train = torch.cat([torch.full((9,), CORE_GROUP), torch.arange(-3, 2).repeat(9)])
    scores = torch.cat([torch.full((9,), 0.5), torch.full((45,), 0.01)]).double()
    cal = MondrianConformal(score="absolute", alpha=0.1).fit(scores, train)
    fitted = RefinedCalibration.from_dict(RefinedCalibration(5, cal, ["a"], core=True).to_dict())
    lo, hi = fitted.intervals(np.linspace(-10, 0.5, 7), np.zeros(7), 5, 0.1, n_core=2)
    np.testing.assert_allclose((hi - lo)[:2], 1.0)
    np.testing.assert_allclose((hi - lo)[2:], 0.02)
    old = RefinedCalibration.from_dict({k: v for k, v in fitted.to_dict().items() if k != "core"})
    assert not old.core  # files fitted before group core orbitals from the HOMO
    lo, hi = old.intervals(np.linspace(-10, 0.5, 7), np.zeros(7), 5, 0.1, n_core=2)
    np.testing.assert_allclose(hi - lo, 0.02)  # clamped to the deepest valence group
