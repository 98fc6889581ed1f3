"""Applicability domain of perturbation models: calibration, power on another simulator, rules, round-trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sciml.perturbation.domain import PerturbationDomain, batch_pvalue, fit_domain, rule_reasons
from sciml.perturbation.sim.simulate import SimConfig, log_normalise, simulate_conditions

TRAIN = ["A+ctrl", "B+ctrl", "A+B", "C+D"]


def controls(cfg: dict, seed_cells: int, n: int) -> np.ndarray:
    """``n`` log1p control cells from the simulator setting ``cfg`` (network seeded by ``cfg['seed']``)."""
    from sciml.perturbation.sim.grn import random_grn

    c = SimConfig.from_dict({**cfg, "control_cells": n})
    rng = np.random.default_rng(c.seed)
    grn = random_grn(c.n_genes, c.n_masters, c.n_regulators, c.and_share, rng, level=c.level, hill=c.hill,
                     or_share=c.or_share)
    cells = simulate_conditions(grn, [()], c, np.random.default_rng([c.seed, seed_cells]))
    return log_normalise(cells["counts"], c.target_sum)


@pytest.fixture(scope="module")
def default_cells() -> np.ndarray:
    return controls({"n_genes": 40, "n_masters": 5, "n_regulators": 12, "n_singles": 8, "n_doubles": 4}, 1, 900)


def test_exchangeable_cells_flagged_at_most_beta(default_cells):
    """Per-cell flag rate on held-out exchangeable cells <= β + 3 sd (calibration Beta draw + binomial)."""
    fit, held = default_cells[:600], default_cells[600:]
    dom = fit_domain(fit, TRAIN, beta=0.05, seed=0)
    rate = float((dom.cell_pvalues(held) <= 0.05).mean())
    n_cal, m = dom.score.n_calib, len(held)
    sd = math.sqrt(0.05 * 0.95 * (1 / (n_cal + 2) + 1 / m))
    assert rate <= 0.05 + 3 * sd
    assert dom.control_pvalue(held) > 0.05  # the population is in domain
    assert all(dom.assess(["A+B"], held)["in_domain"])


def test_other_simulator_setting_is_flagged(default_cells):
    dom = fit_domain(default_cells[:600], TRAIN, seed=0)
    small = {"n_genes": 40, "n_masters": 5, "n_regulators": 12, "n_singles": 8, "n_doubles": 4}
    for shifted in (small | {"zero_inflation": 0.15, "n_batches": 2, "batch_sd": 0.2},  # grn_noisy.yaml's noise
                    small | {"hill": 4.0, "or_share": 0.5, "and_share": 0.6}):  # grn_cooperative.yaml's regulation
        x = controls(shifted, 2, 200)
        assert dom.control_pvalue(x) <= 0.05
        out = dom.assess(["A+B"], x)
        assert out["in_domain"] == [False] and "no guarantee" in out["note"][0]


def test_rules_flag_unseen_gene_and_unmeasured_single():
    assert rule_reasons("A+B", TRAIN) == []
    assert rule_reasons("A+ctrl", TRAIN) == []
    assert rule_reasons("A+E", TRAIN) == ["never perturbed in training: E (graph embedding only)"]
    assert rule_reasons("C+D", TRAIN) == ["single never measured in training: C D"]  # the double itself trained
    assert rule_reasons("A+C", TRAIN) == ["single never measured in training: C"]


def test_batch_pvalue_median_rule():
    assert batch_pvalue(np.array([0.01, 0.02, 0.5])) == pytest.approx(0.04)
    assert batch_pvalue(np.array([0.9, 0.8])) == 1.0
    with pytest.raises(ValueError):
        batch_pvalue(np.array([]))


def test_too_few_calibration_cells_refused(default_cells):
    with pytest.raises(ValueError, match="calibration control cells"):
        fit_domain(default_cells[:60], TRAIN, beta=0.05)


def test_round_trip_through_json(default_cells):
    dom = fit_domain(default_cells[:600], TRAIN, seed=3)
    back = PerturbationDomain.from_dict(json.loads(json.dumps(dom.to_dict())))
    x = default_cells[600:]
    np.testing.assert_array_equal(back.cell_pvalues(x), dom.cell_pvalues(x))
    assert back.train_conditions == TRAIN and back.seed == 3
    bad = dom.to_dict() | {"components": [[1.0, 2.0]]}
    with pytest.raises(ValueError, match="components"):
        PerturbationDomain.from_dict(bad)
    with pytest.raises(ValueError, match="keys"):
        PerturbationDomain.from_dict({k: v for k, v in dom.to_dict().items() if k != "seed"})
