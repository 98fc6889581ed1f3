"""The masking prior of doubles (denoised singles, smaller same-sign effect absorbed), its choice on training + val
doubles (scored without changing the model), and ``flow.exact_mean``: each property checked by a test that fails
when it breaks."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn.masking import denoise, masking, masking_prior
from sciml.perturbation.select import choose_masking

from .doubles_dm import DoublesDM, screen_of

G, V = 8, 10
CTRL = 5.0  # control level high enough that clipping at 0 does not enter


def _pair(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(G, generator=gen), torch.randn(G, generator=gen)


def test_masking_interpolates_between_additive_and_the_larger_single():
    da, db = _pair()
    torch.testing.assert_close(masking(da, db, 0.0), da + db)
    torch.testing.assert_close(masking(da, db, 0.6), masking(db, da, 0.6))  # symmetric in a, b
    full = masking(da, db, 1.0)
    same = torch.sign(da) == torch.sign(db)
    larger = torch.where(da.abs() >= db.abs(), da, db)
    assert same.any() and (~same).any()
    torch.testing.assert_close(full[same], larger[same])
    torch.testing.assert_close(full[~same], (da + db)[~same])  # opposite signs: no masking


def test_denoise_zeroes_effects_within_the_threshold_and_shrinks_the_others():
    delta = torch.tensor([0.1, -0.1, 1.0, -2.0])
    var = torch.full((4,), 0.04)  # standard error 0.2
    torch.testing.assert_close(denoise(delta, var, 0.0), delta)
    got = denoise(delta, var, 1.0)
    torch.testing.assert_close(got[:2], torch.zeros(2))  # |Δ| below √τ standard errors
    torch.testing.assert_close(got[2:], delta[2:] * (1 - 0.04 / delta[2:] ** 2))
    assert (torch.sign(got[2:]) == torch.sign(delta[2:])).all()


def _model(**flow):
    torch.manual_seed(0)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, [f"g{i}" for i in range(V)], n_measured=G,
                         flow={"path": "control", "steps": 4, "sigma": 0.0, "prior": "masking",
                               "own_genes": "additive", **flow}, optim={"scheduler": "none"})
    m.net.set_graph(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    return m.eval()


def test_prior_mean_of_a_double_is_the_masking_prior_except_own_columns_and_under_the_fallback():
    m = _model(kappa=0.7, denoise=1.0)
    gen = torch.Generator().manual_seed(1)
    effects = {i: torch.randn(G, generator=gen) for i in range(4)}
    variances = {i: 0.1 * torch.rand(G, generator=gen) for i in range(4)}
    m.set_single_effects(effects, variances)
    got = m.prior_mean(torch.tensor([[2, 3], [2, -1]]))
    rule = masking_prior(effects[2], effects[3], variances[2], variances[3], 0.7, 1.0)
    add = effects[2] + effects[3]
    torch.testing.assert_close(got[0, [0, 1, 4, 5, 6, 7]], rule[[0, 1, 4, 5, 6, 7]])
    torch.testing.assert_close(got[0, [2, 3]], add[[2, 3]])  # the perturbed genes' own columns
    torch.testing.assert_close(got[1], effects[2])  # a measured single is its measurement
    m.set_prior(additive_fallback=True)
    torch.testing.assert_close(m.prior_mean(torch.tensor([[2, 3]]))[0], add)


def _screen(truth, noise: float = 0.0, seed: int = 2):
    """Model with singles 0..9 (measured with ``noise``) and a ``DoublesDM`` of 24 doubles ``truth(Δ_a, Δ_b)``."""
    gen = torch.Generator().manual_seed(seed)
    true = {i: torch.randn(G, generator=gen) * (torch.rand(G, generator=gen) < 0.5) for i in range(V)}
    m = _model(kappa="auto", denoise="auto")
    m.set_single_effects({i: t + noise * torch.randn(G, generator=gen) for i, t in true.items()},
                         {i: torch.full((G,), noise**2) for i in true})
    pairs = [(a, b) for a in range(V) for b in range(a + 1, V)][:24]
    deltas = {f"g{a}+g{b}": truth(true[a], true[b]) for a, b in pairs}
    keys = list(deltas)
    return m, DoublesDM(deltas, {"train": keys[:20], "val": keys[20:], "test": []}, G, CTRL)


@pytest.mark.parametrize("name", ["masking", "additive", "additive_noisy_singles"])
def test_choose_masking_finds_the_rule_of_the_screen(name):
    truth = {"masking": lambda a, b: masking(a, b, 1.0), "additive": lambda a, b: a + b,
             "additive_noisy_singles": lambda a, b: a + b}[name]
    m, dm = _screen(truth, noise=0.3 if name == "additive_noisy_singles" else 0.0)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    choice = choose_masking(m.prior_settings, screen_of(m, dm))
    chosen = choice.settings
    assert choice.n == 24
    assert (m.prior_settings.kappa, m.prior_settings.denoise) == ("auto", "auto")  # the model is not changed
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in state.items())
    if name == "masking":
        assert chosen.kappa >= 0.9 and chosen.denoise == 0.0, choice
    elif name == "additive":  # exact singles, additive doubles: the additive prior, nothing to denoise
        assert (chosen.kappa, chosen.denoise) == (0.0, 0.0), choice
    else:  # singles measured with noise, half of their entries truly 0: denoising pays
        assert chosen.denoise > 0.0, choice
        best = choice.mse[f"{chosen.kappa},{chosen.denoise}"]
        assert best < 0.97 * choice.mse[f"{chosen.kappa},0.0"], choice


def test_choose_masking_keeps_a_fixed_value_and_falls_back_to_additive_without_doubles():
    m, dm = _screen(lambda a, b: masking(a, b, 1.0))
    assert choose_masking(m.prior_settings.replace(denoise=0.5), screen_of(m, dm)).settings.denoise == 0.5
    dm.conditions = {"train": [], "val": [], "test": []}
    choice = choose_masking(m.prior_settings, screen_of(m, dm))
    assert (choice.settings.kappa, choice.settings.denoise, choice.n) == (0.0, 0.0, 0)


def test_exact_mean_generates_the_prior_mean_where_every_single_is_known():
    m = _model(kappa=1.0, remainder_mean=1.0)
    with torch.no_grad():  # a network that moves the mean (a trained one is not zero)
        for p in m.net.parameters():
            if p.dim() >= 1 and float(p.abs().sum()) == 0.0:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.3)
    m.set_single_effects({0: torch.linspace(-1, 1, G), 1: torch.ones(G)})
    x_ctrl = torch.rand(3, 64, G, generator=torch.Generator().manual_seed(0))
    pert = torch.tensor([[0, 1], [0, -1], [0, 9]])  # known double, known single, one unknown single
    x0 = x_ctrl.clone()
    free = m.sample(x_ctrl, pert, x0=x0)
    ctrl_mean = torch.full((G,), 0.5)
    m.set_prior(exact_mean=True)
    cells = m.sample(x_ctrl, pert, x0=x0, ctrl_mean=ctrl_mean)
    assert (cells >= 0).all()
    expected = (ctrl_mean + m.prior_mean(pert[:2])).clamp_min(0.0)
    torch.testing.assert_close(cells[:2].mean(1), expected, atol=1e-5, rtol=0)
    assert (free[:2].mean(1) - expected).abs().max() > 1e-2  # without it the network moves the mean
    torch.testing.assert_close(cells[2], free[2])  # an unknown single: the network's cells, not projected


def test_blend_averages_the_masking_prior_with_the_combination_rule():
    gen = torch.Generator().manual_seed(3)
    effects = {i: torch.randn(G, generator=gen) for i in range(4)}
    variances = {i: 0.1 * torch.rand(G, generator=gen) for i in range(4)}
    pert = torch.tensor([[2, 3]])
    alone = _model(kappa=0.7, denoise=1.0)
    alone.set_single_effects(effects, variances)
    blended = _model(kappa=0.7, denoise=1.0, blend=0.75, shrink=0.5)
    blended.set_single_effects(effects, variances)
    assert blended.combination is not None and alone.combination is None
    add = effects[2] + effects[3]
    with torch.no_grad():
        rule = blended.combination(effects[2][None], effects[3][None], blended.ctrl_mean)[0]
    comb = add + 0.5 * (rule - add)
    got, mask = blended.prior_mean(pert)[0], alone.prior_mean(pert)[0]
    other = [0, 1, 4, 5, 6, 7]
    torch.testing.assert_close(got[other], 0.75 * mask[other] + 0.25 * comb[other])
    torch.testing.assert_close(got[[2, 3]], add[[2, 3]])  # own columns stay additive in both parts
    blended.set_prior(blend=1.0)
    torch.testing.assert_close(blended.prior_mean(pert)[0], mask)
    blended.set_prior(blend=0.75, additive_fallback=True)
    torch.testing.assert_close(blended.prior_mean(pert)[0], add)


def test_blend_chooses_kappa_for_the_masking_part_alone_and_refuses_bad_values():
    m, dm = _screen(lambda a, b: masking(a, b, 1.0))
    alone = choose_masking(m.prior_settings, screen_of(m, dm))
    blended = choose_masking(m.prior_settings.replace(blend=0.5), screen_of(m, dm))
    assert blended.mse == alone.mse and blended.settings == alone.settings.replace(blend=0.5)
    with pytest.raises(ValueError, match="flow.blend"):
        _model(blend=1.5)
    with pytest.raises(ValueError, match="needs flow.prior: masking"):
        _model(blend=0.5, prior="combination")
