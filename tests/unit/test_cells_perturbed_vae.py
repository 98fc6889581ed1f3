import numpy as np
import pytest
import torch

pytest.importorskip("anndata")

from sciml.perturbation.data.anndata_io import write_h5ad  # noqa: E402
from sciml.perturbation.baselines.simple import get_baseline  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.baselines.perturbed_vae import PerturbedVAENet  # noqa: E402
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402


def test_response_kl_matches_torch_distributions():
    torch.manual_seed(0)
    net = PerturbedVAENet(n_genes=6, n_pert_genes=3, d_inv=2, d_p=3, hidden=8)
    with torch.no_grad():
        net.a.copy_(torch.randn(3, 3))
    mu, logvar = torch.randn(3), torch.randn(3) * 0.3
    s = torch.randn(3)
    w = net.w()
    winv = torch.linalg.inv(w)
    prior = torch.distributions.MultivariateNormal(winv @ s, covariance_matrix=winv @ winv.T)
    post = torch.distributions.MultivariateNormal(mu, covariance_matrix=torch.diag(logvar.exp()))
    expected = torch.distributions.kl_divergence(post, prior)
    trace = (logvar.exp().unsqueeze(-2) * w**2).sum((-1, -2))
    ours = 0.5 * (trace + ((mu @ w.T) - s).pow(2).sum() - 3 - logvar.sum())
    assert torch.allclose(ours, expected, atol=1e-5)
    assert torch.allclose(torch.linalg.det(w), torch.tensor(1.0))


def test_fit_and_predict_shapes_and_seed(tmp_path):
    path = write_h5ad(toy_adata(n_singles=4, cells=20, seed=0), tmp_path / "toy.h5ad")
    dm = PerturbationDataModule(str(path), split={"kind": "additive"}, cells_per_condition=8,
                                conditions_per_batch=2, steps_per_epoch=5, knn=3)
    dm.setup()
    a = get_baseline("perturbed_vae", steps=12, hidden=16).fit(dm)
    c = dm.conditions["test"][0]
    ctrl = dm.control_matrix()[:7]
    cells = a.sample(c, ctrl)
    assert cells.shape == (7, len(dm.genes)) and cells.dtype == np.float32
    assert a.predict_mean(c).shape == (len(dm.genes),)
    torch.manual_seed(123)  # the fit seeds itself: a second fit gives the same prediction
    b = get_baseline("perturbed_vae", steps=12, hidden=16).fit(dm)
    np.testing.assert_allclose(a.predict_mean(c), b.predict_mean(c), atol=1e-6)
    with pytest.raises(ValueError, match="unknown"):
        get_baseline("gears")
