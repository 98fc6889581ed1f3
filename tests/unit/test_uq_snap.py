"""SNAP-UQ: isotonic calibrator, surprisal rises off-distribution, σ(x) in normalised conformal keeps coverage."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sciml.uq import SnapUQ, SplitConformal, isotonic_fit, isotonic_predict

torch.set_num_threads(1)


def test_isotonic_is_monotone_least_squares() -> None:
    """PAV pools violators: (1, 3, 2, 4) -> (1, 2.5, 2.5, 4)."""
    xs, fit = isotonic_fit(torch.tensor([0.0, 1.0, 2.0, 3.0]), torch.tensor([1.0, 3.0, 2.0, 4.0]))
    assert fit.tolist() == [1.0, 2.5, 2.5, 4.0]
    assert isotonic_predict(xs, fit, torch.tensor([-5.0, 1.5, 10.0])).tolist() == [1.0, 2.5, 4.0]


def _model_and_data():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    x = torch.rand(1500, 2, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, :1]) + 0.1 * torch.randn(1500, 1, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, x, y, g


def test_surprisal_ood_and_conformal_coverage() -> None:
    """Inputs far outside the training box are more surprising; normalised CP with σ(x) covers ≥ 1-α - 3 SE."""
    model, x, y, g = _model_and_data()
    snap = SnapUQ(model, taps=["1", "3"], dims=[32, 32], rank=4).fit_heads(x[:500], epochs=300)
    x_ood = torch.rand(500, 2, generator=g) * 2 + 3
    assert snap.surprisal(x_ood).median() > 2 * snap.surprisal(x[500:1000]).median()
    with torch.no_grad():
        pred = model(x).squeeze(-1).double()
    resid = (y.squeeze(-1).double() - pred).abs()
    snap.calibrate(x[500:1000], resid[500:1000])
    sigma = snap.sigma(x)
    assert (sigma > 0).all()
    cal = SplitConformal("normalized", 0.1).fit_predictions(pred[:1000], y[:1000, 0].double(), sigma[:1000])
    band = cal.predict_set(pred[1000:], sigma[1000:])
    cov = band.contains(y[1000:, 0].double()).double().mean().item()
    assert cov >= 0.9 - 3 * math.sqrt(0.09 / 500)


def test_bad_taps() -> None:
    """Unknown tap names fail with the known module names; sigma needs calibration first."""
    model = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1))
    with pytest.raises(ValueError, match="taps"):
        SnapUQ(model, taps=["0", "nope"], dims=[4, 1])
    with pytest.raises(RuntimeError, match="calibrate"):
        SnapUQ(model, taps=["0", "1"], dims=[4, 1]).sigma(torch.rand(3, 2))


def test_custom_pool_for_node_level_taps() -> None:
    """Node-level activations (n_nodes, d) are pooled per graph by a user pool; S has one value per graph."""
    from torch_geometric.utils import scatter

    class NodeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 8), nn.Linear(8, 8)

        def forward(self, graph):
            return scatter(self.b(torch.tanh(self.a(graph["x"]))), graph["batch"], reduce="mean")

    g = torch.Generator().manual_seed(0)
    graph = {"x": torch.randn(50, 3, generator=g), "batch": torch.arange(10).repeat_interleave(5)}
    snap = SnapUQ(NodeNet(), ["a", "b"], [8, 8], rank=2,
                  pool=lambda act, x: scatter(act, x["batch"], reduce="mean")).fit_heads(graph, epochs=20)
    assert snap.surprisal(graph).shape == (10,)
