import numpy as np
import pytest

pytest.importorskip("anndata")

from sciml.perturbation.sim.grn import GRN, random_grn  # noqa: E402
from sciml.perturbation.sim.simulate import SimConfig, read_ground_truth, simulate  # noqa: E402

SMALL = {"n_genes": 40, "n_masters": 5, "n_regulators": 14, "n_singles": 8, "n_doubles": 8,
         "cells_per_condition": 40, "control_cells": 80, "steps": 20}


@pytest.fixture(scope="module")
def sim():
    return simulate(SMALL | {"seed": 1})


def test_deterministic_with_seed(sim):
    again = simulate(SMALL | {"seed": 1})
    np.testing.assert_array_equal(again.layers["counts"], sim.layers["counts"])
    np.testing.assert_array_equal(again.uns["grn"]["true_mean"], sim.uns["grn"]["true_mean"])
    other = simulate(SMALL | {"seed": 2})
    assert not np.array_equal(other.uns["grn"]["true_mean"], sim.uns["grn"]["true_mean"])


def test_layout(sim):
    g = sim.uns["grn"]
    counts = sim.layers["counts"]
    assert np.array_equal(counts, np.round(counts)) and (counts >= 0).all()
    expected = np.log1p(counts / counts.sum(1, keepdims=True) * 1e4)
    np.testing.assert_allclose(sim.X, expected, rtol=1e-5)
    labels = set(sim.obs["condition"])
    assert "ctrl" in labels and len(labels) == 1 + 8 + 8 == len(g["conditions"])
    assert all(lab.endswith("+ctrl") or "+" in lab for lab in labels - {"ctrl"})
    assert g["interaction"].shape == (8, 40) and len(g["noise_floor"]) == 8
    assert 0.0 <= g["fraction_interacting"] <= 1.0


def test_ground_truth_interaction_definition(sim):
    gt = read_ground_truth(sim)
    mu = gt["true_mean"]
    for double, eps in gt["interaction"].items():
        a, b = double.split("+")
        np.testing.assert_allclose(eps, mu[double] - mu[f"{a}+ctrl"] - mu[f"{b}+ctrl"] + mu["ctrl"], atol=1e-5)


def test_and_pairs_interact_and_disjoint_regulators_do_not():
    rng = np.random.default_rng(0)
    # gene 0, 1 masters; gene 2 = AND(0, 1); gene 3 regulated by 0 alone; gene 4 by 1 alone
    grn = GRN(basal=np.array([20.0, 20.0, 1.0, 1.0, 1.0]), target=np.array([2, 3, 4]),
              regs=np.array([[0, 1], [0, -1], [1, -1]]), activating=np.ones((3, 2), bool),
              half=np.full((3, 2), 20.0), strength=np.array([40.0, 20.0, 20.0]))

    def log_mean(genes):
        mult = np.ones(5)
        mult[list(genes)] = 0.1
        return np.log1p(grn.steady_state(mult))

    eps = log_mean([0, 1]) - log_mean([0]) - log_mean([1]) + log_mean([])
    assert abs(eps[2]) > 0.3  # the AND target: knocking down either regulator already silences it
    np.testing.assert_allclose(eps[[0, 1, 3, 4]], 0.0, atol=1e-12)  # single-input genes stay additive
    big = random_grn(60, 6, 20, and_share=1.0, rng=rng)
    assert big.and_pairs() and (big.regs[:, 1] >= 0).all()
    assert not random_grn(60, 6, 20, and_share=0.0, rng=rng).and_pairs()


def test_default_has_interacting_doubles_beyond_noise():
    adata = simulate({"seed": 0})
    g = adata.uns["grn"]
    and_pairs = set(g["and_pairs"])
    is_and = np.array([d in and_pairs for d in g["doubles"]])
    ratio = g["interaction_norm"] / g["noise_floor"]
    assert g["fraction_interacting"] >= 0.3
    assert np.median(ratio[is_and]) > 3 * np.median(ratio[~is_and])


def test_config_errors():
    with pytest.raises(ValueError, match="unknown keys \\['nope'\\]"):
        SimConfig.from_dict({"nope": 1})
    with pytest.raises(ValueError, match="perturbation 'crispr'"):
        SimConfig.from_dict({"perturbation": "crispr"})


@pytest.mark.parametrize("kind", ["knockout", "activation"])
def test_perturbation_types(kind):
    adata = simulate(SMALL | {"perturbation": kind, "seed": 0})
    eff = adata.obs["efficiency"].to_numpy()
    pert = (adata.obs["condition"] != "ctrl").to_numpy()
    assert (eff[~pert] == 0).all()
    assert (eff[pert] == 1).all() if kind == "knockout" else eff[pert].mean() == pytest.approx(3.0, rel=0.15)


def _two_regulator_grn(logic_or: bool, hill: float = 2.0) -> GRN:
    """Masters 0, 1 (basal 20) activate gene 2 through one two-regulator term (AND or OR)."""
    return GRN(basal=np.array([20.0, 20.0, 0.0]), target=np.array([2]), regs=np.array([[0, 1]]),
               activating=np.ones((1, 2), bool), half=np.full((1, 2), 20.0), strength=np.array([40.0]), hill=hill,
               logic_or=np.array([logic_or]))


def test_or_term_needs_both_regulators_down_and_term_is_and():
    """OR: either regulator suffices (one knockout keeps the target ≥ half); AND: one knockout silences it."""
    ones = np.ones(3)
    for logic_or in (False, True):
        grn = _two_regulator_grn(logic_or)
        full = grn.steady_state(ones)[2]
        one = grn.steady_state(np.array([0.0, 1.0, 1.0]))[2]
        both = grn.steady_state(np.array([0.0, 0.0, 1.0]))[2]
        phi = 0.5  # x = h: φ = 1/2 for each regulator
        expected = 40 * (phi + phi - phi * phi if logic_or else phi * phi)
        assert full == pytest.approx(expected)
        assert both == pytest.approx(0.0)
        assert one == pytest.approx(40 * phi if logic_or else 0.0)


def test_hill_coefficient_sharpens_the_response():
    low, high = _two_regulator_grn(True, 2.0), _two_regulator_grn(True, 4.0)
    half = np.array([0.5, 0.0, 1.0])  # regulator 0 at half its level (10 = h/2), regulator 1 off
    assert low.steady_state(half)[2] == pytest.approx(40 * 0.25 ** 1 / (1 + 0.25))  # (1/2)^2 / (1 + (1/2)^2)
    assert high.steady_state(half)[2] == pytest.approx(40 * 0.0625 / (1 + 0.0625))  # (1/2)^4 / (1 + (1/2)^4)


def test_new_knobs_off_leave_the_default_screen_unchanged_and_on_change_it(sim):
    same = simulate(SMALL | {"seed": 1, "hill": 2.0, "or_share": 0.0, "zero_inflation": 0.0, "n_batches": 1})
    np.testing.assert_array_equal(same.layers["counts"], sim.layers["counts"])
    assert set(sim.obs["batch"]) == {"b0"}
    noisy = simulate(SMALL | {"seed": 1, "zero_inflation": 0.3, "n_batches": 2, "batch_sd": 0.5})
    zeros, base = (noisy.layers["counts"] == 0).mean(), (sim.layers["counts"] == 0).mean()
    # a share p of counts zeroed on top of the NB zeros z: z + p(1 − z) in expectation (± binomial noise)
    assert zeros == pytest.approx(base + 0.3 * (1 - base), abs=0.02)
    assert set(noisy.obs["batch"]) == {"b0", "b1"}
    ctrl = noisy[(noisy.obs["condition"] == "ctrl").to_numpy()]
    by_batch = [np.log1p(ctrl.layers["counts"][(ctrl.obs["batch"] == b).to_numpy()].mean(0)) for b in ("b0", "b1")]
    assert np.abs(by_batch[0] - by_batch[1]).mean() > 0.2  # per-gene batch factors, sd 0.5 in log


def test_or_share_makes_or_terms():
    rng = np.random.default_rng(0)
    grn = random_grn(60, 6, 20, 0.8, rng, or_share=0.5)
    two = grn.regs[:, 1] >= 0
    assert grn.logic_or is not None and not grn.logic_or[~two].any()
    assert 0.3 < grn.logic_or[two].mean() < 0.7
    assert random_grn(60, 6, 20, 0.8, np.random.default_rng(0)).logic_or is None
