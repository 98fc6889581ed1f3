"""Empirical-Bayes (ash) shrinkage of measured single effects and the masking prior's ``denoise: eb`` / ``eb_single``.

Statistical checks use fixed seeds; the bounds follow from the Bayes posterior mean: it shrinks each effect by a
factor in [0, 1], recovers Δ/2 under a N(0, 1) prior with unit noise, and beats the raw estimates in squared error on
a sparse screen. The mixture weights (interior point, :func:`fit_weights`) are checked against plain EM (Dempster et
al. 1977), the algorithm that converges to the same optimum slowly: by the certified gap of
:func:`~sciml.perturbation.nn.shrinkage.duality_gap` (concavity), the fitted weights' mean log-likelihood is at least
the EM's minus :data:`~sciml.perturbation.nn.shrinkage.GAP_TOLERANCE`, for any number of EM steps.
"""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.nn import shrinkage
from sciml.perturbation.nn.masking import masking
from sciml.perturbation.nn.shrinkage import ash_by_row, ash_posterior_mean, duality_gap, fit_columns, fit_weights
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


def _em(lik: torch.Tensor, steps: int) -> torch.Tensor:
    """Plain EM for the mixture weights ``(R, K)`` of ``lik`` ``(R, J, K)``: the reference the solver is checked on."""
    pi = torch.full((lik.shape[0], lik.shape[-1]), 1.0 / lik.shape[-1], dtype=lik.dtype)
    for _ in range(steps):
        post = lik * pi[:, None, :]
        pi = (post / post.sum(-1, keepdim=True)).mean(-2)
    return pi


def _mean_log_lik(lik: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    return (lik @ pi[..., None]).squeeze(-1).log().mean(-1)


def _ash_lik(delta: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale grid ``(R, K)`` and the row-rescaled likelihoods ``(R, J, K)`` ash fits its weights on."""
    scales = shrinkage.scale_grid(delta, var)
    logp = shrinkage._log_marginal(delta, var, scales)
    return scales, (logp - logp.amax(-1, keepdim=True)).exp()


def _rows(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded ``(6, 400)`` effects and variances: null, dense, sparse, huge effects among noise, tiny, unequal s.e."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(6, 400, generator=gen, dtype=torch.float64)
    sparse = 3 * torch.randn(400, generator=gen, dtype=torch.float64) * (torch.rand(400, generator=gen) < 0.1)
    huge = torch.zeros(400, dtype=torch.float64)
    huge[:3] = 1e4
    delta = torch.stack([noise[0], noise[1] + torch.randn(400, generator=gen, dtype=torch.float64),
                         noise[2] + sparse, noise[3] + huge, 1e-8 * noise[4], 5 * noise[5]])
    var = torch.ones_like(delta)
    var[4] = 1e-16
    var[5] = 0.1 + torch.rand(400, generator=gen, dtype=torch.float64)
    return delta, var


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_weights_are_certified_optimal_and_at_least_as_good_as_em(seed):
    delta, var = _rows(seed)
    _, lik = _ash_lik(delta, var)
    pi = fit_weights(lik)
    assert (pi >= 0).all() and torch.allclose(pi.sum(-1), torch.ones(6, dtype=torch.float64), atol=1e-12, rtol=0)
    gap = duality_gap(lik, pi)
    assert (gap < shrinkage.GAP_TOLERANCE).all() and (gap > -1e-12).all(), gap
    for steps in (10, 300, 3000):  # f(π) ≥ f(π*) − gap ≥ f(π_EM) − GAP_TOLERANCE, however long the EM runs
        assert (_mean_log_lik(lik, pi) >= _mean_log_lik(lik, _em(lik, steps)) - shrinkage.GAP_TOLERANCE).all()


def test_the_weights_are_the_em_fixed_point_on_a_well_separated_mixture():
    gen = torch.Generator().manual_seed(3)
    scales = torch.tensor([0.0, 0.5, 2.0, 8.0], dtype=torch.float64)  # four distinct components: a unique optimum
    true = torch.tensor([[0.7, 0.2, 0.05, 0.05], [0.1, 0.3, 0.3, 0.3], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    comp = torch.multinomial(true, 400, replacement=True, generator=gen)
    delta = scales[comp] * torch.randn(3, 400, generator=gen, dtype=torch.float64)
    delta = delta + torch.randn(3, 400, generator=gen, dtype=torch.float64)
    total = scales.square() + 1.0
    logp = -0.5 * (delta[..., None].square() / total + total.log())
    lik = (logp - logp.amax(-1, keepdim=True)).exp()
    pi, em = fit_weights(lik), _em(lik, 20_000)
    assert (duality_gap(lik, em) < 1e-8).all()  # the EM has nearly converged too (2e-9, 2e-16, 4e-16)
    torch.testing.assert_close(pi, em, atol=1e-5, rtol=0)  # 4e-6 on the row whose EM is 2e-9 short, else 1e-8


def test_posterior_means_approach_the_ones_of_a_longer_em():
    """With a finer scale grid the optimum is flat in ``π``; EM nears it slowly, its posterior means nearing ours."""
    gen = torch.Generator().manual_seed(6)
    beta = 0.3 * torch.randn(2, 1000, generator=gen, dtype=torch.float64)
    beta = beta * (torch.rand(2, 1000, generator=gen) < 0.05)
    var = torch.full_like(beta, 0.0025)
    delta = beta + 0.05 * torch.randn(2, 1000, generator=gen, dtype=torch.float64)
    scales, lik = _ash_lik(delta, var)
    shrink = scales.square()[:, None, :] / (scales.square()[:, None, :] + var[..., None])

    def post(pi):
        return (lik * pi[:, None, :] / (lik @ pi[..., None]) * shrink).sum(-1) * delta

    ours = post(fit_weights(lik))
    torch.testing.assert_close(ours, ash_by_row(delta, var))  # the same posterior means as the shipped function
    gaps = [float((post(_em(lik, steps)) - ours).abs().max() / 0.05) for steps in (300, 3000, 20_000)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.01, gaps  # in standard errors


def test_a_single_effect_puts_all_weight_on_its_likeliest_component():
    lik = torch.tensor([[[0.2, 1.0, 0.5]], [[1.0, 1.0, 1.0]]], dtype=torch.float64)  # J = 1; a tie in row 1
    pi = fit_weights(lik)
    assert float(pi[0, 1]) > 1 - 1e-9 and (duality_gap(lik, pi) < shrinkage.GAP_TOLERANCE).all()
    torch.testing.assert_close(pi[1].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_a_row_all_null_or_all_zero_is_shrunk_to_zero():
    gen = torch.Generator().manual_seed(7)
    delta = torch.stack([torch.randn(300, generator=gen, dtype=torch.float64), torch.zeros(300, dtype=torch.float64)])
    post = ash_by_row(delta, torch.ones_like(delta))
    assert post[0].abs().mean() < 0.2 * delta[0].abs().mean() and not post[1].any()


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
    torch.testing.assert_close(m.shrunk_singles()[m.rows[:4]], ash_by_row(known, var))
    m.set_prior(denoise="eb")  # another denoiser: the cached table is recomputed
    torch.testing.assert_close(m.shrunk_singles()[m.rows[:4]], ash_posterior_mean(known, var))


def test_denoise_eb_masks_the_shrunk_singles_and_is_recomputed_with_new_effects():
    m, effects, variances = _with_singles("eb", 3)
    known = torch.stack([effects[i] for i in range(4)])
    shrunk = ash_posterior_mean(known, torch.stack([variances[i] for i in range(4)]))
    torch.testing.assert_close(m.shrunk_singles()[m.rows[:4]], shrunk)
    assert not m.shrunk_singles()[m.rows[4:]].any()  # unknown singles stay zero
    got = m.prior_mean(torch.tensor([[0, 1], [0, -1]]))
    rule = masking(shrunk[0], shrunk[1], 0.5)
    torch.testing.assert_close(got[0, 2:], rule[2:])
    torch.testing.assert_close(got[0, :2], effects[0][:2] + effects[1][:2])  # own columns: measured singles
    torch.testing.assert_close(got[1], effects[0])  # a measured single is its measurement
    m.set_single_effects({i: 2 * e for i, e in effects.items()}, variances)  # new effects: shrunk anew
    torch.testing.assert_close(m.shrunk_singles()[m.rows[:4]], ash_posterior_mean(2 * known, torch.stack(
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


def test_rows_still_above_the_tolerance_after_the_last_step_are_logged(monkeypatch, caplog):
    delta, var = _rows(0)
    _, lik = _ash_lik(delta, var)
    monkeypatch.setattr(shrinkage, "MAX_STEPS", 2)
    with caplog.at_level("WARNING", logger=shrinkage.__name__):
        pi = fit_weights(lik)
    assert "above the gap tolerance" in caplog.text and torch.isfinite(pi).all()


def test_rows_in_blocks_give_the_rows_at_once(monkeypatch):
    g = torch.Generator().manual_seed(3)
    var = torch.rand(7, 300, generator=g, dtype=torch.float64) * 0.05 + 0.01
    delta = torch.randn(7, 300, generator=g, dtype=torch.float64) * (torch.rand(7, 300, generator=g) < 0.2) \
        + var.sqrt() * torch.randn(7, 300, generator=g, dtype=torch.float64)
    whole = shrinkage.ash_by_row(delta, var)
    monkeypatch.setattr(shrinkage, "POSTERIOR_ENTRIES", 2 * 300 * (shrinkage.N_SCALES + 1))  # 2 rows per block
    torch.testing.assert_close(shrinkage.ash_by_row(delta, var), whole, rtol=0, atol=1e-12)
