"""Coverage, mean width, Winkler score (hand-computed examples) and the miss probability of a coverage check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sciml.uq import Interval, PredictionSet, coverage, coverage_miss_probability, mean_width, winkler_score


def _example() -> tuple[Interval, torch.Tensor]:
    iv = Interval(torch.tensor([0.0, 1.0, -1.0, 0.0]), torch.tensor([2.0, 3.0, 1.0, 4.0]))
    y = torch.tensor([1.0, 4.0, -3.0, 4.0])  # inside, above by 1, below by 2, on the upper bound
    return iv, y


def test_interval_is_a_prediction_set() -> None:
    """Interval satisfies the PredictionSet protocol."""
    assert isinstance(_example()[0], PredictionSet)


def test_coverage_and_width() -> None:
    """Coverage counts closed bounds; mean width averages upper - lower."""
    iv, y = _example()
    assert coverage(iv, y).item() == 0.5
    assert mean_width(iv).item() == 2.5  # widths 2, 2, 2, 4


def test_winkler_hand_computed() -> None:
    """Winkler score against a hand computation at two alphas."""
    iv, y = _example()
    # alpha = 0.1, 2/alpha = 20: W = [2, 2 + 20*1, 2 + 20*2, 4] = [2, 22, 42, 4], mean 70/4.
    assert winkler_score(iv, y, 0.1).item() == pytest.approx(17.5, abs=1e-6)
    # alpha = 0.5, 2/alpha = 4: W = [2, 6, 10, 4], mean 5.5.
    assert winkler_score(iv, y, 0.5).item() == pytest.approx(5.5, abs=1e-6)


def test_unbounded_interval_metrics() -> None:
    """Unbounded intervals: coverage 1, infinite width and score."""
    iv = Interval(torch.full((3,), -math.inf), torch.full((3,), math.inf))
    y = torch.tensor([0.0, 1e30, -5.0])
    assert coverage(iv, y).item() == 1.0
    assert mean_width(iv).item() == math.inf
    assert winkler_score(iv, y, 0.1).item() == math.inf


def test_metric_errors() -> None:
    """Bad alpha, shape mismatch and empty inputs raise ValueError."""
    iv, y = _example()
    with pytest.raises(ValueError, match="alpha"):
        winkler_score(iv, y, 0.0)
    with pytest.raises(ValueError, match="shape"):
        winkler_score(iv, y[:2], 0.1)
    empty = Interval(torch.empty(0), torch.empty(0))
    with pytest.raises(ValueError, match="empty"):
        coverage(empty, torch.empty(0))
    with pytest.raises(ValueError, match="empty"):
        mean_width(empty)


@pytest.mark.parametrize(("n_calib", "n_test", "tol"), [(400, 260, 0.03), (50, 30, 0.05)])
def test_coverage_miss_probability_matches_split_conformal_simulation(n_calib, n_test, tol):
    """Simulate split conformal in one group (uniform scores: the k-th order statistic is the threshold)."""
    rng = np.random.default_rng(0)
    reps, k = 20000, int(np.ceil((n_calib + 1) * 0.9))
    threshold = np.sort(rng.random((reps, n_calib)), axis=1)[:, k - 1]
    covered = (rng.random((reps, n_test)) <= threshold[:, None]).mean(1)
    simulated = (np.abs(covered - 0.9) > tol).mean()
    exact = coverage_miss_probability(n_calib, n_test, 0.1, tol)
    assert abs(simulated - exact) <= 4 * np.sqrt(exact * (1 - exact) / reps)  # 4 Monte Carlo standard errors


def test_coverage_miss_probability_edges():
    assert coverage_miss_probability(5, 100, 0.1, 0.03) == 1.0  # k > n: the set is everything, coverage 1
    assert coverage_miss_probability(5, 100, 0.02, 0.03) == 0.0  # ... which is within 0.03 of 0.98
    assert coverage_miss_probability(10**6, 10**6, 0.1, 0.03) < 1e-6  # sd 3e-4 each: 0.03 is ~70 sd
    with pytest.raises(ValueError, match="n_calib"):
        coverage_miss_probability(0, 10, 0.1, 0.03)


def test_bounded_width_separates_unbounded_sets():
    from sciml.uq import Interval, bounded_width

    sets = Interval(torch.tensor([0.0, 1.0, -torch.inf, 2.0]), torch.tensor([1.0, 4.0, 0.0, torch.inf]))
    width, unbounded = bounded_width(sets)
    assert width == pytest.approx(2.0) and unbounded == pytest.approx(0.5)
    with pytest.raises(ValueError, match="empty"):
        bounded_width(Interval(torch.zeros(0), torch.zeros(0)))
