"""Label cost: the label-free stopping rule keeps split-conformal coverage; active PPI is unbiased with valid CIs."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import SplitConformal, active_ppi_mean, expected_size, query_probabilities, stopping_size
from sciml.uq.quantile import conformal_rank

torch.set_num_threads(1)
ALPHA = 0.1


def _size_at(q: torch.Tensor) -> torch.Tensor:
    """Interval width 2q for the absolute score."""
    return 2 * q


def test_expected_size_matches_beta_order_statistic() -> None:
    """Uniform candidates, size = q: E_m = E[U_(k)] = k/(m+1)."""
    cand = (torch.arange(100000, dtype=torch.float64) + 0.5) / 100000
    for m in (20, 50, 200):
        k = conformal_rank(m, ALPHA)
        assert expected_size(cand, lambda q: q, m, ALPHA) == pytest.approx(k / (m + 1), abs=2e-3)
    assert expected_size(cand, lambda q: q, 5, ALPHA) == math.inf  # k > m


def test_stopping_size_decreases_with_cost() -> None:
    """A dearer label stops earlier; the rule never returns fewer than ⌈1/α⌉ - 1 labels."""
    cand = torch.randn(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64).abs()
    sizes = [stopping_size(cand, _size_at, ALPHA, cost) for cost in (1e-4, 1e-3, 1e-2)]
    assert sizes[0] > sizes[1] > sizes[2] >= 9


def test_stopped_calibration_keeps_coverage() -> None:
    """m* from unlabelled data only, then split CP on m* labels: coverage over 800 trials within 3 SE of
    k/(m*+1) (m* is fixed by the unlabelled pool, independent of the labels)."""
    g = torch.Generator().manual_seed(1)
    sigma_pool = 0.5 + torch.rand(5000, generator=g, dtype=torch.float64)
    cand = sigma_pool * torch.randn(5000, generator=g, dtype=torch.float64).abs()
    m = stopping_size(cand, _size_at, ALPHA, cost=2e-3)
    covs = []
    for _ in range(800):
        scores = (0.5 + torch.rand(m, generator=g, dtype=torch.float64)) * torch.randn(m, generator=g).abs()
        cal = SplitConformal("absolute", ALPHA).fit(scores.double())
        test = (0.5 + torch.rand(500, generator=g, dtype=torch.float64)) * torch.randn(500, generator=g).abs()
        covs.append((test <= cal.threshold()).double().mean().item())
    c = torch.tensor(covs)
    assert abs(c.mean().item() - conformal_rank(m, ALPHA) / (m + 1)) <= 3 * c.std().item() / math.sqrt(len(c))


def test_active_ppi_unbiased_and_covers() -> None:
    """Over 600 trials: mean estimate within 3 SE of E[Y] and CI coverage within 3 SE (+0.01 CLT slack) of 0.9."""
    g = torch.Generator().manual_seed(2)
    hits, ests = [], []
    for trial in range(600):
        x = torch.rand(2000, generator=g, dtype=torch.float64)
        y = 2 * x + (0.2 + x) * torch.randn(2000, generator=g, dtype=torch.float64)
        res = active_ppi_mean(2 * x + 0.1, y, 0.2 + x, budget=0.2, tau=0.5 if trial % 2 else 1.0, generator=g)
        hits.append(res.lower <= 1.0 <= res.upper)
        ests.append(res.estimate)
    e = torch.tensor(ests)
    assert abs(e.mean().item() - 1.0) <= 3 * e.std().item() / math.sqrt(len(e))
    cov = sum(hits) / len(hits)
    assert abs(cov - 0.9) <= 3 * math.sqrt(0.09 / len(hits)) + 0.01


def test_query_probabilities() -> None:
    """π has mean ≈ budget, is constant at τ = 1, and bad inputs are rejected."""
    u = torch.rand(1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.allclose(query_probabilities(u, 0.1, 1.0), torch.full((1000,), 0.1, dtype=torch.float64))
    assert query_probabilities(u, 0.1, 0.0).mean().item() == pytest.approx(0.1, abs=0.01)
    with pytest.raises(ValueError, match="budget"):
        query_probabilities(u, 1.5, 0.5)
    with pytest.raises(ValueError, match="uncertainty"):
        query_probabilities(-u, 0.1, 0.5)
