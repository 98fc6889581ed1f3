"""``sciml.hamiltonian.seed``: the closed-shell density of an H; a model's guess as a picklable callable."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from sciml.hamiltonian.scf.refine import density_matrix
from sciml.hamiltonian.seed import ModelGuess


def test_density_is_idempotent_and_holds_the_electrons():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 7))
    s = a @ a.T + 7 * np.eye(7)  # an overlap: symmetric positive definite
    h = rng.normal(size=(7, 7))
    h = h + h.T
    d = density_matrix(h, s, 3)
    np.testing.assert_allclose(d, d.T, atol=1e-12)
    np.testing.assert_allclose(d @ s @ d, 2 * d, atol=1e-10)  # D S D = 2 D: doubly occupied orbitals
    assert np.trace(d @ s) == pytest.approx(6.0)


def test_model_guess_pickles_by_path_and_skips_unseen_elements():
    pytest.importorskip("pyscf")
    guess = ModelGuess("organic-pbe-def2svp", "def2-svp")
    again = pickle.loads(pickle.dumps(guess))  # what a worker process receives: the path, not the network
    assert again._predictor is None and len(pickle.dumps(guess)) < 1000
    water = np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.467], [0.0, -0.757, -0.467]])
    d = again((8, 1, 1), water)
    assert d.shape == (24, 24) and np.allclose(d, d.T)
    assert again((9, 1), np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.92]])) is None  # HF: fluorine is outside the model
    with pytest.raises(ValueError, match="trained in basis def2-svp, the SCF uses sto-3g"):
        ModelGuess("organic-pbe-def2svp", "sto-3g")


def test_model_guess_uses_the_callers_h0_only_when_built_the_models_way():
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.data.generate import SCFSettings, zeroth_step_record

    guess = ModelGuess("organic-pbe-def2svp", "def2-svp")
    numbers = (8, 1, 1)
    water = np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.467], [0.0, -0.757, -0.467]])
    own = guess(numbers, water)
    zeroth = zeroth_step_record(numbers, water, SCFSettings(h0=guess.predictor.h0))
    np.testing.assert_allclose(guess(numbers, water, zeroth), own, atol=1e-10)  # the same H0: the same start
    wrong = {**zeroth, "H0": np.zeros_like(zeroth["H0"])}
    assert not np.allclose(guess(numbers, water, wrong), own, atol=1e-3)  # the given H0 is what the model read
    other = "full" if guess.predictor.h0 == "fast" else "fast"
    np.testing.assert_allclose(guess(numbers, water, {**wrong, "h0": other}), own, atol=1e-10)  # built another way


def test_a_refined_guess_starts_nearer_the_scf_density():
    """K Newton-refined builds of the model's H: a starting density nearer the converged one than the plain guess."""
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf, zeroth_step_record

    numbers = (8, 1, 1)
    water = np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.467], [0.0, -0.757, -0.467]])
    plain, refined = ModelGuess("organic-pbe-def2svp", "def2-svp"), ModelGuess("organic-pbe-def2svp", "def2-svp", 2)
    assert pickle.loads(pickle.dumps(refined)).refine == 2
    res = run_molecule_scf(numbers, water, SCFSettings())
    scf = density_matrix(res["mats"]["H"], res["mats"]["S"], res["n_occupied"])
    far, near = (np.abs(g(numbers, water) - scf).max() for g in (plain, refined))
    assert near < 0.1 * far  # water: the refined start is ~80x nearer
    zeroth = zeroth_step_record(numbers, water, SCFSettings(h0=refined.predictor.h0))
    own = refined(numbers, water)
    np.testing.assert_allclose(refined(numbers, water, zeroth), own, atol=1e-9)  # the caller's H0: not rebuilt
    wrong = {**zeroth, "H0": 0.9 * zeroth["H0"]}
    assert not np.allclose(refined(numbers, water, wrong), own, atol=1e-4)  # ... and it is what the model read
    with pytest.raises(ValueError, match="--seed-refine must be >= 0"):
        ModelGuess("organic-pbe-def2svp", "def2-svp", -1)
