"""Overlapping groups: max-over-groups thresholds cover >= 1 - α inside every group (500 seeded trials)."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import MultiGroupConformal

torch.set_num_threads(1)
ALPHA = 0.1


def _draw(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores |N(0, σ²)| with σ set by two overlapping attributes; membership (n, 4): a=0, a=1, b=0, b=1."""
    a = torch.rand(n, generator=g) < 0.3
    b = torch.rand(n, generator=g) < 0.5
    sigma = 1.0 + 3.0 * a.double() + 1.0 * b.double()
    members = torch.stack([~a, a, ~b, b], -1)
    return sigma * torch.randn(n, generator=g, dtype=torch.float64).abs(), members


def test_every_group_covers() -> None:
    """Mean coverage inside each of the 4 overlapping groups >= 1 - α - 3 SE; marginal likewise."""
    g = torch.Generator().manual_seed(0)
    cov = [[] for _ in range(5)]
    for _ in range(500):
        s_cal, m_cal = _draw(200, g)
        cal = MultiGroupConformal("absolute", ALPHA).fit(s_cal, m_cal)
        s_te, m_te = _draw(400, g)
        hit = s_te <= cal.threshold(m_te)
        for k in range(4):
            cov[k].append(hit[m_te[:, k]].double().mean().item())
        cov[4].append(hit.double().mean().item())
    for c in map(torch.tensor, cov):
        assert c.mean().item() >= 1 - ALPHA - 3 * c.std().item() / math.sqrt(len(c))


def test_threshold_is_max_over_groups_and_inf_outside() -> None:
    """q(x) is the largest group threshold among x's groups; no group gives +inf."""
    scores = torch.arange(1, 41, dtype=torch.float64)
    members = torch.stack([scores <= 20, scores > 10], -1)
    cal = MultiGroupConformal("absolute", 0.25).fit(scores, members)
    # k = ⌈21·0.75⌉ = 16 of 1..20; k = ⌈31·0.75⌉ = 24 of 11..40 → 34
    assert cal.group_thresholds().tolist() == [16.0, 34.0]
    test = torch.tensor([[True, False], [True, True], [False, False]])
    assert cal.threshold(test).tolist() == [16.0, 34.0, math.inf]
    with pytest.raises(ValueError, match="groups"):
        cal.threshold(torch.ones(2, 3, dtype=torch.bool))
