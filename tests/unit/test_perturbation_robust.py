"""Robustness properties of the flow model, each by a test that fails when the property breaks:
non-negative cells, perturbed genes' own columns at their singles, shrinkage towards additive chosen on val,
the additive fallback, and the cached fast sampler equal to recomputing everything at every step."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn import integrate

from .doubles_dm import DoublesDM, screen_of

G, V = 8, 10


def _model(**flow):
    torch.manual_seed(0)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, [f"g{i}" for i in range(V)], n_measured=G,
                         flow={"path": "control", "steps": 4, "sigma": 0.0, **flow}, optim={"scheduler": "none"})
    m.net.set_graph(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    return m


def _randomise_head(m):
    """Make the zero-initialised network contribute (a trained network's velocity is not zero)."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.net.parameters():
            if p.dim() >= 1 and float(p.abs().sum()) == 0.0:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return m


def _ctrl(c=3, n=16, seed=0):
    return torch.rand(c, n, G, generator=torch.Generator().manual_seed(seed))


def _rule_model(**flow):
    m = _model(prior="combination", **flow).eval()
    gen = torch.Generator().manual_seed(1)
    effects = {i: torch.randn(G, generator=gen) for i in range(6)}
    m.set_single_effects(effects)
    doubles = [(a, b, torch.tanh(effects[a] + effects[b])) for a, b in [(2, 3), (2, 4), (3, 5), (4, 5), (3, 4)]]
    m.fit_combination(doubles, torch.zeros(G))
    return m, effects


def test_generated_cells_are_nonnegative_and_the_projection_is_a_clamp():
    m = _randomise_head(_model()).eval()
    m.set_single_effects({0: -3.0 * torch.ones(G)})  # a knockdown that would push every gene below zero
    x_ctrl, pert = _ctrl(), torch.tensor([[0, -1], [0, -1], [0, -1]])
    cells = m.sample(x_ctrl, pert)
    assert (cells >= 0).all()
    m.set_flow(nonnegative=False)
    raw = m.sample(x_ctrl, pert)
    assert (raw < 0).float().mean() > 0.5  # the projection is doing work here
    torch.testing.assert_close(cells, raw.clamp_min(0))


def test_own_genes_of_a_double_stay_at_the_sum_of_their_singles():
    m, effects = _rule_model(own_genes="additive")
    pert = torch.tensor([[0, 1]])
    mean = m.prior_mean(pert)[0]
    add = effects[0] + effects[1]
    torch.testing.assert_close(mean[[0, 1]], add[[0, 1]])  # genes 0 and 1 are the perturbed ones
    m.set_prior(own_genes="rule")
    rule = m.prior_mean(pert)[0]
    assert (rule[[0, 1]] - add[[0, 1]]).abs().max() > 1e-3  # without the setting the rule moves them
    torch.testing.assert_close(rule[2:], mean[2:])  # other genes: the rule either way


@pytest.mark.parametrize("lam", [0.0, 0.25, 1.0])
def test_shrink_mixes_rule_and_additive(lam):
    m, effects = _rule_model(shrink=lam)
    pert = torch.tensor([[0, 1]])
    add = effects[0] + effects[1]
    with torch.no_grad():
        rule = m.combination(effects[0], effects[1], m.ctrl_mean)
    torch.testing.assert_close(m.prior_mean(pert)[0], add + lam * (rule - add))


def test_fallback_generates_the_additive_mean_even_with_a_trained_network():
    m = _randomise_head(_model(prior="combination", remainder_mean=1.0, nonnegative=False)).eval()
    m.set_single_effects({0: torch.linspace(-1, 1, G), 1: torch.ones(G)})
    x_ctrl = _ctrl(n=32)
    pert = torch.tensor([[0, 1], [9, -1], [0, 9]])  # known double, unknown single, one unknown of two
    free = m.sample(x_ctrl, pert).mean(1) - x_ctrl.mean(1)
    m.set_prior(additive_fallback=True)
    assert m.hparams["flow"]["additive_fallback"] is True  # saved with the checkpoint / artifact
    got = m.sample(x_ctrl, pert).mean(1) - x_ctrl.mean(1)
    mean_single = (torch.linspace(-1, 1, G) + torch.ones(G)) / 2  # unknown single: mean training single effect
    expected = torch.stack([torch.linspace(-1, 1, G) + 1, mean_single, torch.linspace(-1, 1, G) + mean_single])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (free - expected).abs().max() > 1e-2  # the free network does move the mean


@pytest.mark.parametrize("max_genes", [None, 3])
def test_cached_context_equals_recomputing_every_step(max_genes):
    m = _randomise_head(_model(prior="additive", max_genes=max_genes, nonnegative=False)).eval()
    m.set_single_effects({0: torch.linspace(-1, 1, G)})
    x_ctrl, pert = _ctrl(), torch.tensor([[0, -1], [0, 9], [-1, -1]])
    x0 = x_ctrl.clone()
    fast = m.sample(x_ctrl, pert, steps=3, method="rk4", x0=x0)
    with torch.no_grad():
        slow = integrate(lambda x, t: m.velocity(x, t.expand(x.shape[:2]), x_ctrl, pert), x0, 3, "rk4")
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-6)


def test_choose_shrink_picks_additive_when_the_rule_does_not_generalise_and_the_rule_when_it_does():
    from sciml.perturbation.select import choose_shrink

    m = _model(prior="combination")
    gen = torch.Generator().manual_seed(2)
    effects = {i: torch.randn(G, generator=gen) for i in range(10)}
    m.set_single_effects(effects)
    pairs = [(a, b) for a in range(10) for b in range(a + 1, 10)][:24]
    conditions = {"train": [f"g{a}+g{b}" for a, b in pairs[:20]], "val": [f"g{a}+g{b}" for a, b in pairs[20:]]}
    for name, truth in (("saturating", lambda a, b: torch.tanh(a + b)),
                        ("additive+noise", lambda a, b: a + b + 0.5 * torch.randn(G, generator=gen))):
        deltas = {f"g{a}+g{b}": truth(effects[a], effects[b]) for a, b in pairs}
        dm = DoublesDM(deltas, conditions, G)
        m.fit_combination([(a, b, deltas[f"g{a}+g{b}"]) for a, b in pairs[:20]], torch.zeros(G))
        rule = {k: v.clone() for k, v in m.combination.state_dict().items()}
        choice = choose_shrink(m.prior_settings, screen_of(m, dm), m.combination, folds=4)
        assert choice.n == {"val": 4, "train": 20}
        assert all(torch.equal(v, m.combination.state_dict()[k]) for k, v in rule.items())  # refitted on copies
        if name == "saturating":
            assert choice.settings.shrink >= 0.75, choice
        else:  # pure noise around additive: the cross-fitted rule only adds variance
            assert choice.settings.shrink <= 0.25, choice


@pytest.mark.parametrize("fallback", [True, False])
def test_card_says_whether_the_model_beats_additive_on_val(fallback):
    from sciml.perturbation.export import model_card
    from sciml.perturbation.select import apply_fallback

    m = _model()
    check = {"flow_mse": 0.02 if not fallback else 0.05, "additive_mse": 0.04, "n_val": 3,
             "beats_additive": not fallback}
    assert apply_fallback(m, check) is fallback
    cfg = {"module": dict(m.hparams), "data": {"path": "x.h5ad"}}
    data = {"conditions": {"train": [1], "val": [1, 2, 3]}, "data_sha256": "0" * 64,
            "split": {"kind": "combo_seen2", "seed": 0}}
    card = model_card("m", cfg, data, {}, 0.2, check)
    assert ("does not beat the additive baseline on val" in card) is fallback
    assert ("Better than the additive baseline on val" in card) is not fallback
    assert "0.04 for the additive baseline" in card
