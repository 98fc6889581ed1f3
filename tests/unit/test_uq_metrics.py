"""Coverage, mean width and Winkler score on hand-computed examples."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import Interval, PredictionSet, coverage, mean_width, winkler_score


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
