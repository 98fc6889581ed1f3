"""Prediction on each condition's most affected genes (``flow.predict_genes``): the rest move by the prior mean."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn.ode import integrate

G, V = 8, 10


def _model(**flow):
    torch.manual_seed(0)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, [f"g{i}" for i in range(V)], n_measured=G,
                         flow={"steps": 3, "method": "euler", "nonnegative": False, **flow})
    m.net.set_graph(torch.tensor([[0, 1, 2, 4], [1, 2, 3, 6]]))
    for p in m.parameters():  # small random weights instead of the zero initialisation: the network does something
        if p.dim() > 1 and (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    m.set_single_effects({0: torch.linspace(-1, 1, G), 1: torch.tensor([0, 3, 0, -2, 0, 0.5, 0, 0.1])})
    return m.eval()


PERT = torch.tensor([[0, -1], [1, -1], [0, 1]])


def test_focus_is_each_conditions_largest_prior_mean_effects():
    m = _model(predict_genes=3)
    focus = m.focus(PERT)
    expected = m.prior_mean(PERT).abs().topk(3, -1).indices.sort(-1).values
    assert focus.shape == (3, 3) and torch.equal(focus, expected)
    assert torch.equal(focus[1], torch.tensor([1, 3, 5]))  # |3|, |-2|, |0.5| of single 1


@pytest.mark.parametrize("flow", [{"predict_genes": None}, {"predict_genes": G}, {"predict_genes": "auto"},
                                  {"predict_genes": 3, "path": "noise"}])
def test_no_focus_on_narrow_panels_without_a_prior_start_or_when_off(flow):
    assert _model(**flow).focus(PERT) is None


def test_no_focus_in_training():
    assert _model(predict_genes=3).train().focus(PERT) is None


def test_focused_sample_runs_the_network_on_the_focus_and_shifts_the_rest():
    m = _model(predict_genes=3)
    gen = torch.Generator().manual_seed(1)
    x_ctrl = torch.rand(3, 5, G, generator=gen)
    x0 = x_ctrl + 0.1 * torch.randn(3, 5, G, generator=gen)
    cells = m.sample(x_ctrl, PERT, x0=x0)
    shift = m.shift(PERT, m.prior(PERT))  # (C, 1, G)
    for c, genes in enumerate(m.focus(PERT)):
        rest = torch.ones(G, dtype=torch.bool)
        rest[genes] = False
        torch.testing.assert_close(cells[c][:, rest], (x0[c] + shift[c])[:, rest])
        sub_ctrl, pert = x_ctrl[c:c + 1, :, genes], PERT[c:c + 1]
        flow = integrate(lambda x, t: m.velocity(x, t.expand(x.shape[:2]), sub_ctrl, pert, genes),  # noqa: B023
                         x0[c:c + 1, :, genes], 3, "euler")
        torch.testing.assert_close(cells[c:c + 1, :, genes], flow)
    whole = _model(predict_genes=None).sample(x_ctrl, PERT, x0=x0)
    assert float((whole - cells).abs().max()) > 1e-3  # the focus is a different (cheaper) computation


def test_predict_genes_is_saved_with_the_model():
    m = _model(predict_genes=3)
    assert PerturbationFlow(**m.hparams).flow["predict_genes"] == 3
    m.set_flow(predict_genes=None)
    assert PerturbationFlow(**m.hparams).flow["predict_genes"] is None and m.focus(PERT) is None
    m.set_flow(predict_genes="auto")  # resolved for this 8-gene panel: every gene
    assert m.flow["predict_genes"] is None and m.hparams["flow"]["predict_genes"] == "auto"


def test_generate_on_threads_gives_the_cells_of_one_thread():
    from sciml.perturbation import predict

    m = _model(predict_genes=3)
    ctrl = torch.rand(40, G, generator=torch.Generator().manual_seed(2)).numpy()
    rows = [[0, -1], [1, -1], [0, 1], [1, 0], [0, -1]]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = predict.generate(m, ctrl, rows, 300, seed=3)  # one condition per group: five groups
        torch.set_num_threads(2)
        two = predict.generate(m, ctrl, rows, 300, seed=3)
        assert torch.get_num_threads() == 2  # restored after the worker threads
    finally:
        torch.set_num_threads(before)
    assert one.shape == (5, 300, G) and (one[1:] == two[1:]).all()  # on one torch thread each: the same cells
    torch.testing.assert_close(two[0], one[0], rtol=1e-6, atol=1e-6)  # the first group on 2: float32 rounding
    assert not (one[0] == one[4]).all()  # the same condition at another position: its own draws
