"""PerturbedVAE baseline: its loss is the negative ELBO of the linear-Gaussian SCM prior; fit and predict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

pytest.importorskip("anndata")

from sciml.perturbation.baselines.perturbed_vae import PerturbedVAENet  # noqa: E402
from sciml.perturbation.baselines.simple import get_baseline  # noqa: E402
from sciml.perturbation.data.anndata_io import write_h5ad  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402


def _constant_decoder(net: PerturbedVAENet, out: torch.Tensor, log_tau: torch.Tensor) -> None:
    """Make the decoder ignore z (zero last layer, bias ``out``): the loss is then deterministic."""
    with torch.no_grad():
        net.decoder[-1].weight.zero_()
        net.decoder[-1].bias.copy_(out)
        net.log_tau.copy_(log_tau)


def test_loss_is_the_negative_elbo_of_the_scm_prior():
    """With a decoder that ignores z, ``loss`` = −log p(x | z) + KL(q ‖ prior) exactly (no sampling noise).

    Reference: torch.distributions, with the prior N(0, I) ⊗ N(W⁻¹ s, W⁻¹ W⁻ᵀ) of the response SCM written as
    one block-diagonal Gaussian, and the reconstruction term as a Normal log-density (loss drops ½ log 2π per gene).
    """
    torch.manual_seed(0)
    g, d_inv, d_p = 6, 2, 3
    net = PerturbedVAENet(n_genes=g, n_pert_genes=3, d_inv=d_inv, d_p=d_p, hidden=8).double()
    out, log_tau = torch.randn(g, dtype=torch.float64), 0.3 * torch.randn(g, dtype=torch.float64)
    _constant_decoder(net, out, log_tau)
    with torch.no_grad():
        net.a.copy_(torch.randn(d_p, d_p))
    x, s = torch.randn(4, g, dtype=torch.float64), torch.randn(4, d_p, dtype=torch.float64)
    loss, mu_inv = net.loss(x, s)
    mu, logvar = net.encode(x)
    w_inv = torch.linalg.inv(torch.eye(d_p, dtype=torch.float64) - torch.tril(net.a.detach(), -1))
    cov = torch.block_diag(torch.eye(d_inv, dtype=torch.float64), w_inv @ w_inv.T)
    prior = MultivariateNormal(torch.cat([torch.zeros(4, d_inv, dtype=torch.float64), s @ w_inv.T], -1), cov)
    post = MultivariateNormal(mu, torch.diag_embed(logvar.exp()))
    nll = -Normal(out, log_tau.exp()).log_prob(x).sum(-1) - 0.5 * g * math.log(2 * math.pi)
    torch.testing.assert_close(loss, nll + kl_divergence(post, prior), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(mu_inv, mu[:, :d_inv])


def test_loss_reconstruction_term_matches_monte_carlo():
    """A decoder that uses z: the mean loss over reparameterised draws → E_q[−log p(x|z)] + KL, estimated here
    from draws of the posterior made with torch.distributions (tolerance: 5 standard errors)."""
    torch.manual_seed(1)
    net = PerturbedVAENet(n_genes=5, n_pert_genes=2, d_inv=2, d_p=2, hidden=8).double()
    x, s = torch.randn(1, 5, dtype=torch.float64), torch.randn(1, 2, dtype=torch.float64)
    draws = 20000
    with torch.no_grad():  # wide posterior (log σ² ≈ 1) and a steep decoder: the draws' spread matters
        net.encoder[-1].bias[4:] += 1.0
        net.decoder[-1].weight.mul_(4.0)
        losses = net.loss(x.expand(draws, 5), s.expand(draws, 2))[0]
        mu, logvar = net.encode(x)
        z = Normal(mu, (0.5 * logvar).exp()).sample((draws,))[:, 0]
        recon = -Normal(net.decoder(z), net.log_tau.exp()).log_prob(x).sum(-1) - 2.5 * math.log(2 * math.pi)
        w_inv = torch.linalg.inv(net.w().double())
        prior = MultivariateNormal(torch.cat([torch.zeros(1, 2, dtype=torch.float64), s @ w_inv.T], -1),
                                   torch.block_diag(torch.eye(2, dtype=torch.float64), w_inv @ w_inv.T))
        kl = kl_divergence(MultivariateNormal(mu, torch.diag_embed(logvar.exp())), prior)
    se = math.hypot(float(losses.std()), float(recon.std())) / math.sqrt(draws)
    assert float(losses.mean()) == pytest.approx(float(recon.mean() + kl), abs=5 * se)


def test_prior_sample_follows_the_scm():
    """z_p = W⁻¹(s + ε): sample mean W⁻¹ s and covariance W⁻¹ W⁻ᵀ (20 000 draws; 5 standard errors)."""
    net = PerturbedVAENet(n_genes=4, n_pert_genes=2, d_inv=1, d_p=3, hidden=4)
    with torch.no_grad():
        net.a.copy_(torch.tensor([[0.0, 0, 0], [0.8, 0, 0], [-0.5, 1.2, 0]]))
    s = torch.tensor([0.5, -1.0, 2.0])
    with torch.no_grad():
        z = net.prior_sample(s.expand(20000, 3), torch.Generator().manual_seed(0)).double()
        w_inv = torch.linalg.inv(net.w()).double()
    cov = w_inv @ w_inv.T
    se = (cov.diagonal() / 20000).sqrt()
    assert ((z.mean(0) - w_inv @ s.double()).abs() < 5 * se).all()
    torch.testing.assert_close(torch.cov(z.T), cov, atol=0.08, rtol=0.05)
    assert float(torch.linalg.det(net.w().detach())) == pytest.approx(1.0)  # strictly lower-triangular A: det W = 1


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
