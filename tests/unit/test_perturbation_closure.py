"""Closure of the masking prior on data normalised to a fixed total per cell (``flow.closure``): detection of
closed data, the rescaling's defining property, its place in the model's prior mean, and loading older states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sciml.perturbation.data.table import make_key
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn.masking import close, closure_terms
from sciml.perturbation.screen import Screen, data_closure
from sciml.perturbation.select import resolve
from sciml.perturbation.settings import PriorSettings

G, V, TOTAL = 8, 10, 1e4


def _controls(n: int = 300, seed: int = 0, closed: bool = True) -> torch.Tensor:
    """log1p(counts / library · TOTAL) of Poisson cells (n, G), every gene kept (closed) or the last dropped."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rng.uniform(2, 40, G + 1), (n, G + 1)) + 1.0
    counts = counts[:, :G] if closed else counts
    x = np.log1p(counts / counts.sum(1, keepdims=True) * TOTAL)
    return torch.as_tensor(x[:, :G], dtype=torch.float32)


def _expected_total(terms: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``Σ_g w_g expm1(max(μ0 + Δ, 0))``: the population's expected total over the controls' (1 at the controls)."""
    return (terms[1].double() * torch.expm1((terms[0].double() + delta.double()).clamp_min(0))).sum(-1)


def test_closure_terms_detect_closed_data_and_weigh_the_controls_to_one():
    assert closure_terms(_controls(closed=False)) is None  # a gene dropped after normalising: totals vary
    terms = closure_terms(_controls())
    assert terms is not None and terms.shape == (2, G)
    x = _controls().double()
    # the Jensen factor makes the weights reproduce the controls' own total exactly
    torch.testing.assert_close(_expected_total(terms, torch.zeros(G)), torch.tensor(1.0, dtype=torch.float64),
                               rtol=1e-5, atol=0)
    torch.testing.assert_close(terms[0].double(), x.mean(0), rtol=1e-6, atol=1e-6)


def test_close_keeps_the_controls_and_rescales_any_effect_to_their_total():
    terms = closure_terms(_controls())
    torch.testing.assert_close(close(torch.zeros(G), terms), torch.zeros(G), atol=1e-5, rtol=0)
    delta = torch.randn(5, G, generator=torch.Generator().manual_seed(1))
    closed = close(delta, terms)
    assert not torch.allclose(_expected_total(terms, delta), torch.ones(5, dtype=torch.float64), atol=1e-2)
    torch.testing.assert_close(_expected_total(terms, closed), torch.ones(5, dtype=torch.float64), rtol=1e-4, atol=0)
    loss = torch.zeros(G)
    loss[:3] = -4.0  # mass lost in three genes only: every other gene rises
    assert (close(loss, terms)[3:] > 0).all()
    # a common shift of every effect (the singles' double-counted total) is undone by the closure: exactly in log
    # space; log1p(y) − log(y) < 1/y, so in log1p up to twice e^(−m) at the smallest level m = μ0 + Δ reached
    low = float((terms[0] + delta).min())
    assert low > 2.0
    torch.testing.assert_close(close(delta + 0.3, terms), closed, atol=2 * torch.exp(torch.tensor(-low)).item(), rtol=0)


def _model(**flow):
    torch.manual_seed(0)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, [f"g{i}" for i in range(V)], n_measured=G,
                         flow={"path": "control", "steps": 4, "sigma": 0.0, "prior": "masking", **flow},
                         optim={"scheduler": "none"})
    m.net.set_graph(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    gen = torch.Generator().manual_seed(2)
    m.set_single_effects({i: torch.randn(G, generator=gen) for i in range(4)},
                         {i: 0.01 * torch.rand(G, generator=gen) for i in range(4)})
    return m.eval()


def test_prior_mean_closes_doubles_only_and_not_under_the_fallback():
    m = _model(kappa=0.0, denoise=0.0)
    pert = torch.tensor([[0, 1], [2, -1], [1, 8]])  # known double, single, double with an unknown single
    open_mean = m.prior_mean(pert)
    terms = closure_terms(_controls())
    m.set_closure(terms)
    assert m.prior_settings.closure is True and m.config["flow"]["closure"] is True
    mean = m.prior_mean(pert)
    torch.testing.assert_close(mean[0], close(open_mean[0], terms))  # additive (κ = τ = 0) and closed
    torch.testing.assert_close(mean[1:], open_mean[1:])
    torch.testing.assert_close(m.prior_mean(pert, torch.tensor([1, 5]))[0], mean[0, [1, 5]])  # gene subset
    m.set_prior(additive_fallback=True)
    torch.testing.assert_close(m.prior_mean(pert)[0], open_mean[0])  # the fallback is the additive baseline
    m.set_closure(None)
    assert m.prior_settings.closure is False and not m.closure.any()


class _Controls:
    """Data-module surface read by :func:`data_closure`: conditions and control cells."""

    def __init__(self, x: torch.Tensor, cell_types=("",)) -> None:
        self.x = x.numpy()
        self.conditions = {"train": [make_key("g0", c) for c in cell_types], "val": [], "test": []}

    def control_matrix(self, condition=None):
        return self.x


def _screen(dm: _Controls) -> Screen:
    """A screen of no singles or doubles with the closure terms of ``dm`` (what resolving the closure reads)."""
    return Screen(singles=None, doubles={}, rule_doubles=[], ctrl_mean=None, closure=data_closure(dm),
                  perturbed_genes=[])


def test_resolve_sets_closure_auto_on_closed_data_and_names_the_fix_when_required_but_not_closed():
    auto = PriorSettings(prior="masking", closure="auto")
    assert resolve(auto, _screen(_Controls(_controls()))).settings.closure is True
    assert resolve(auto, _screen(_Controls(_controls(closed=False)))).settings.closure is False
    # one control mean per cell type: off
    assert resolve(auto, _screen(_Controls(_controls(), cell_types=("A172", "T98G")))).settings.closure is False
    with pytest.raises(ValueError, match="closure is true.*closure: auto or false"):
        resolve(auto.replace(closure=True), _screen(_Controls(_controls(closed=False))))
    with pytest.raises(ValueError, match="flow.closure is 'yes'"):
        _model(closure="yes")


def test_a_state_saved_before_the_closure_buffer_loads_with_the_closure_off():
    m = _model(kappa=0.5)
    state = {k: v for k, v in m.state_dict().items() if k != "closure"}
    fresh = _model(kappa=0.5)
    fresh.closure.fill_(1.0)
    fresh.load_state_dict(state)
    assert not fresh.closure.any()


def test_the_model_card_names_the_closure_only_when_it_is_on():
    from sciml.perturbation.export import _prior_text

    settings = PriorSettings(prior="masking", kappa=0.5, denoise=1.0)
    assert "flow.closure" in _prior_text(settings.replace(closure=True))
    assert "flow.closure" not in _prior_text(settings.replace(closure=False))
