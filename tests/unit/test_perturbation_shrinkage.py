"""Empirical-Bayes (ash) shrinkage of measured single effects and the masking prior's ``denoise: eb`` / ``eb_single``.

Statistical checks use fixed seeds; the bounds follow from the Bayes posterior mean: it shrinks each effect by a
factor in [0, 1], recovers Δ/2 under a N(0, 1) prior with unit noise, and beats the raw estimates in squared error on
a sparse screen.
"""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.nn import shrinkage
from sciml.perturbation.nn.masking import masking
from sciml.perturbation.nn.shrinkage import ash_by_row, ash_posterior_mean, fit_columns
from sciml.perturbation.settings import PriorSettings

from .doubles_dm import screen_of
from .test_perturbation_masking import _model, _screen

G = 8


def test_posterior_means_shrink_towards_zero_and_keep_strong_effects():
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(500, generator=gen)
    delta = torch.cat([noise, torch.tensor([12.0, -9.0])])
    post = ash_posterior_mean(delta, torch.ones_like(delta))
    factor = post / delta
    assert ((factor >= -1e-12) & (factor <= 1 + 1e-12)).all()  # a convex shrinkage of each effect
    assert post[:500].abs().mean() < 0.2 * noise.abs().mean()  # pure noise: almost all of it removed
    torch.testing.assert_close(post[500:], delta[500:], atol=0.05 * 12, rtol=0.0)  # 9-12 s.e.: kept
    assert post.dtype == delta.dtype and post.shape == delta.shape


def test_a_normal_prior_gives_the_bayes_posterior_mean():
    gen = torch.Generator().manual_seed(1)
    beta = torch.randn(5000, generator=gen, dtype=torch.float64)
    delta = beta + torch.randn(5000, generator=gen, dtype=torch.float64)  # v = 1, prior N(0, 1): E[β|Δ] = Δ/2
    post = ash_posterior_mean(delta, torch.ones_like(delta))
    assert (post - delta / 2).pow(2).mean().sqrt() < 0.02 * delta.std()  # 0.007 here; 200 plain EM steps: 0.048


def test_it_beats_the_raw_effects_on_a_sparse_screen():
    gen = torch.Generator().manual_seed(2)
    beta = 3.0 * torch.randn(2000, generator=gen) * (torch.rand(2000, generator=gen) < 0.1)
    se = 0.5 + torch.rand(2000, generator=gen)  # unequal standard errors
    delta = beta + se * torch.randn(2000, generator=gen)
    post = ash_posterior_mean(delta, se.square())
    assert (post - beta).pow(2).mean() < 0.4 * (delta - beta).pow(2).mean()


def test_one_prior_per_row_fits_a_dense_and_a_null_single_each_on_its_own(monkeypatch):
    monkeypatch.setattr(shrinkage, "FIT_EFFECTS", None)  # the exact fit, every effect (the subsample: below)
    gen = torch.Generator().manual_seed(4)
    beta = torch.stack([torch.randn(2000, generator=gen, dtype=torch.float64), torch.zeros(2000, dtype=torch.float64)])
    delta = beta + torch.randn(2, 2000, generator=gen, dtype=torch.float64)  # unit noise
    var = torch.ones_like(delta)
    rows, pooled = ash_by_row(delta, var), ash_posterior_mean(delta, var)
    # row 0 alone has the N(0, 1) prior: the Bayes posterior mean Δ/2; row 1 alone is all null: about 0
    assert (rows[0] - delta[0] / 2).pow(2).mean().sqrt() < 0.03 * delta[0].std()
    assert rows[1].abs().mean() < 0.1 * delta[1].abs().mean()
    for i in range(2):  # one prior for both rows over-shrinks the dense one and under-shrinks the null one
        assert (rows[i] - beta[i]).pow(2).mean() < (pooled[i] - beta[i]).pow(2).mean()
    torch.testing.assert_close(ash_by_row(delta[:1], var[:1])[0], ash_posterior_mean(delta[0], var[0]))


def test_a_wide_row_fitted_on_a_subsample_shrinks_about_as_well_as_on_every_effect(monkeypatch):
    gen = torch.Generator().manual_seed(5)
    beta = 0.3 * torch.randn(1, 5000, generator=gen, dtype=torch.float64)
    beta = beta * (torch.rand(1, 5000, generator=gen) < 0.05)
    var = 0.003 * (0.5 + torch.rand(1, 5000, generator=gen, dtype=torch.float64))
    delta = beta + var.sqrt() * torch.randn(1, 5000, generator=gen, dtype=torch.float64)
    assert len(fit_columns(5000, 1000)) == 1000 and fit_columns(1000, 1000) is None
    sub = ash_by_row(delta, var)  # FIT_EFFECTS = 1000 of the 5,000
    monkeypatch.setattr(shrinkage, "FIT_EFFECTS", None)
    full = ash_by_row(delta, var)
    assert not torch.equal(sub, full)  # the subsample is used
    raw, err_sub, err_full = ((x - beta).pow(2).mean() for x in (delta, sub, full))
    assert err_full < 0.3 * raw and err_sub < 1.05 * err_full


def test_bad_shapes_are_refused_and_empty_input_passes():
    with pytest.raises(ValueError, match="same shape"):
        ash_posterior_mean(torch.zeros(3), torch.zeros(4))
    assert ash_posterior_mean(torch.zeros(0), torch.zeros(0)).shape == (0,)
    with pytest.raises(ValueError, match="rows, genes"):
        ash_by_row(torch.zeros(3), torch.zeros(3))
    assert ash_by_row(torch.zeros(0, 4), torch.zeros(0, 4)).shape == (0, 4)


def _with_singles(denoise: str, seed: int) -> tuple:
    """A masking model (κ = 0.5) holding 4 random singles; returns it, the effects and their variances."""
    m = _model(kappa=0.5, denoise=denoise)
    gen = torch.Generator().manual_seed(seed)
    effects = {i: torch.randn(G, generator=gen) for i in range(4)}
    variances = {i: 0.5 * torch.rand(G, generator=gen) for i in range(4)}
    m.set_single_effects(effects, variances)
    return m, effects, variances


def test_denoise_eb_single_shrinks_each_single_under_its_own_prior():
    m, effects, variances = _with_singles("eb_single", 5)
    known, var = torch.stack([effects[i] for i in range(4)]), torch.stack([variances[i] for i in range(4)])
    torch.testing.assert_close(m.shrunk_singles()[:4], ash_by_row(known, var))
    m.set_prior(denoise="eb")  # another denoiser: the cached table is recomputed
    torch.testing.assert_close(m.shrunk_singles()[:4], ash_posterior_mean(known, var))


def test_denoise_eb_masks_the_shrunk_singles_and_is_recomputed_with_new_effects():
    m, effects, variances = _with_singles("eb", 3)
    known = torch.stack([effects[i] for i in range(4)])
    shrunk = ash_posterior_mean(known, torch.stack([variances[i] for i in range(4)]))
    torch.testing.assert_close(m.shrunk_singles()[:4], shrunk)
    assert not m.shrunk_singles()[4:].any()  # unknown singles stay zero
    got = m.prior_mean(torch.tensor([[0, 1], [0, -1]]))
    rule = masking(shrunk[0], shrunk[1], 0.5)
    torch.testing.assert_close(got[0, 2:], rule[2:])
    torch.testing.assert_close(got[0, :2], effects[0][:2] + effects[1][:2])  # own columns: measured singles
    torch.testing.assert_close(got[1], effects[0])  # a measured single is its measurement
    m.set_single_effects({i: 2 * e for i, e in effects.items()}, variances)  # new effects: shrunk anew
    torch.testing.assert_close(m.shrunk_singles()[:4], ash_posterior_mean(2 * known, torch.stack(
        [variances[i] for i in range(4)])))
    again = _model(kappa=0.5, denoise="eb")
    again.load_state_dict(m.state_dict())
    torch.testing.assert_close(again.prior_mean(torch.tensor([[0, 1]])), m.prior_mean(torch.tensor([[0, 1]])))


@pytest.mark.parametrize("name", ["eb", "eb_single"])
def test_choose_masking_with_eb_chooses_kappa_only(name):
    from sciml.perturbation.select import choose_masking

    m, dm = _screen(lambda a, b: masking(a, b, 1.0), noise=0.3)
    choice = choose_masking(m.prior_settings.replace(denoise=name), screen_of(m, dm))
    assert choice.settings.denoise == name and choice.settings.kappa >= 0.7, choice
    assert all(key.endswith(f",{name}") for key in choice.mse)


def test_the_model_card_says_how_the_singles_were_denoised():
    from sciml.perturbation.export import _prior_text

    settings = PriorSettings(prior="masking", kappa=0.5)
    eb, tau = _prior_text(settings.replace(denoise="eb")), _prior_text(settings.replace(denoise=1.0))
    assert "empirical-Bayes" in eb and "τ =" not in eb
    assert "τ = 1.0" in tau and "empirical" not in tau
    assert "one prior per single" in _prior_text(settings.replace(denoise="eb_single"))
