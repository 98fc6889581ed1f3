"""Conformal effect bands: sup-norm box over genes, calibrated over conditions."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.uncertainty import EffectBands, gene_scale


def _effects(n, g=30, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sd = torch.linspace(0.1, 1.0, g, dtype=torch.float64)
    pred = torch.randn(n, g, generator=gen, dtype=torch.float64)
    return pred, pred + sd * torch.randn(n, g, generator=gen, dtype=torch.float64)


def test_gene_scale_shrinks_towards_the_mean():
    pred, true = torch.zeros(2, 3), torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    s = gene_scale(pred, true, shrink=2.0)
    m_bar = 1.0 / 3
    torch.testing.assert_close(s, torch.tensor([(2 + 2 * m_bar) / 4, 2 * m_bar / 4, 2 * m_bar / 4],
                                               dtype=torch.float64).sqrt())


def test_simultaneous_coverage_over_many_splits():
    """Marginal coverage of the box over random calib/test draws is ≥ 1 − α (within Monte-Carlo error)."""
    alpha, n_cal, hits, total = 0.2, 9, 0, 0
    fit = _effects(5, seed=99)
    for rep in range(200):
        bands = EffectBands.fit(*fit, *_effects(n_cal, seed=2 * rep), alpha=alpha)
        pred, true = _effects(20, seed=2 * rep + 1)
        hits += int(bands.predict_set(pred).contains(true).sum())
        total += 20
    cover = hits / total
    # E[coverage] = ⌈(n+1)(1−α)⌉/(n+1) = 8/10; sd over 200 reps of Beta-distributed coverage ≈ 0.009
    assert 0.8 - 0.03 < cover < 0.8 + 0.05


def test_too_few_calibration_conditions_give_unbounded_bands():
    bands = EffectBands.fit(*_effects(3), *_effects(3, seed=1), alpha=0.1)
    box = bands.predict_set(torch.zeros(2, 30))
    assert torch.isinf(box.upper).all() and bands.threshold() == float("inf")


def test_roundtrip_through_json_dict():
    import json

    bands = EffectBands.fit(*_effects(4), *_effects(10, seed=1), alpha=0.2)
    again = EffectBands.from_dict(json.loads(json.dumps(bands.to_dict())))
    pred = torch.randn(3, 30, dtype=torch.float64)
    torch.testing.assert_close(again.predict_set(pred).upper, bands.predict_set(pred).upper)
    assert again.alpha == 0.2
    with pytest.raises(ValueError, match="supnorm_box"):
        EffectBands.from_dict({"method": "split"})
