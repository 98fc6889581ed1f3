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
