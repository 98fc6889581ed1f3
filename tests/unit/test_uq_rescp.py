"""ResCP: weighted quantiles, long-run coverage on a stationary series, adaptivity, state round trip."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import ResCP, weighted_quantile

torch.set_num_threads(1)
ALPHA, T = 0.1, 2000


def test_weighted_quantile_uniform_weights_is_order_statistic() -> None:
    """Uniform weights: level p gives the ⌈pn⌉-th smallest value."""
    v = torch.tensor([3.0, 1.0, 4.0, 1.5, 9.0], dtype=torch.float64)
    w = torch.full((5,), 0.2, dtype=torch.float64)
    got = weighted_quantile(v, w, torch.tensor([0.2, 0.4, 0.41, 1.0], dtype=torch.float64))
    assert got.tolist() == [1.0, 1.5, 3.0, 9.0]


def test_weights_sum_to_one_with_test_mass() -> None:
    """Window weights plus the test mass (test_mass × the largest) sum to 1."""
    rescp = ResCP(alpha=ALPHA, window=10)
    for r in torch.randn(15, generator=torch.Generator().manual_seed(0)).tolist():
        rescp.step(torch.tensor([r])).update(r)
    rescp.step(torch.tensor([0.0]))
    w = rescp.weights()
    assert w.numel() == 11 and w.sum().item() == pytest.approx(1.0)
    assert w[-1].item() == pytest.approx(0.2 * w[:-1].max().item())


def test_long_run_coverage_stationary() -> None:
    """i.i.d. residuals: long-run coverage after burn-in within 0.03 of 1 - α (asymptotic method; ±3 SE of
    a Bernoulli(0.9) mean over 1800 steps is ±0.021, plus the window's quantile error)."""
    g = torch.Generator().manual_seed(0)
    y = torch.randn(T, generator=g, dtype=torch.float64)
    band = ResCP(alpha=ALPHA, seed=1).run(torch.zeros(T, dtype=torch.float64), y)
    cov = band.contains(y)[200:].double().mean().item()
    assert abs(cov - (1 - ALPHA)) <= 0.03
    assert math.isfinite(band.size()[200:].max().item())


def test_adapts_to_scale_jump() -> None:
    """After a ×10 jump in noise the widths follow within one window (width ratio > 5)."""
    g = torch.Generator().manual_seed(2)
    scale = torch.where(torch.arange(T) < T // 2, 1.0, 10.0).double()
    y = scale * torch.randn(T, generator=g, dtype=torch.float64)
    width = ResCP(alpha=ALPHA).run(torch.zeros(T, dtype=torch.float64), y).size()
    assert width[-500:].mean() / width[500:1000].mean() > 5


def test_state_dict_round_trip() -> None:
    """A reloaded ResCP gives the same next interval."""
    first = ResCP(alpha=ALPHA, window=20)
    for r in torch.randn(30, generator=torch.Generator().manual_seed(3)).tolist():
        first.step(torch.tensor([r])).update(r)
    second = ResCP(alpha=ALPHA, window=20)
    second.load_state_dict(first.state_dict())
    pred = torch.zeros(1, dtype=torch.float64)
    first.step(torch.tensor([0.3]))
    second.step(torch.tensor([0.3]))
    a, b = first.predict_set(pred), second.predict_set(pred)
    assert torch.equal(a.lower, b.lower) and torch.equal(a.upper, b.upper)
    assert second.hist_r.numel() == 20


def test_bad_input() -> None:
    """Bad reservoir settings and inputs give one-line errors; no residual yet gives an infinite interval."""
    with pytest.raises(ValueError, match="rho"):
        ResCP(rho=1.5)
    with pytest.raises(ValueError, match="reservoir input"):
        ResCP(n_inputs=2).step(torch.tensor([1.0]))
    assert ResCP().predict_set(torch.zeros(1)).size().item() == math.inf
