"""PerturbedVAE-style baseline: invariant latent + perturbation-response latent following a linear-Gaussian SCM.

Our reading of the ICML 2026 PerturbedVAE description (no public code; a compact re-derivation, not a port):

- encoder q(z_inv, z_p | x) = N(μ(x), diag σ²(x)); decoder p(x | z_inv, z_p) = N(f(z_inv, z_p), diag τ²);
- prior z_inv ~ N(0, I); response latent from a linear SCM with strictly lower-triangular weights A, whose
  exogenous means are shifted by the perturbation: z_p = A z_p + s_p + ε, ε ~ N(0, I), s_p = Σ_{g ∈ p} e_g
  (a learned shift per perturbed gene, 0 for control and for genes never perturbed in training);
  so z_p ~ N(W⁻¹ s_p, W⁻¹W⁻ᵀ) with W = I − A, det W = 1 and
  KL(q ‖ prior) = ½ [Σ_ij W_ij² σ_j² + ‖W μ − s_p‖² − d − Σ_j log σ_j²];
- loss = −ELBO + λ ‖mean z_inv(perturbed cells) − mean z_inv(control cells)‖² per condition (λ = 0.05);
- prediction: encode real control cells for z_inv, draw z_p from the perturbed prior, decode the mean.
Non-additivity of doubles can only come from the non-linear decoder.

Known limitation: a double's exogenous shift (the sum of two learned shifts) can lie outside what the decoder saw
in training, so predictions for held-out doubles vary with the seed; it is an optional reference, not a tuned model.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sciml.perturbation.baselines.simple import Baseline


class PerturbedVAENet(nn.Module):
    """Encoder, decoder, SCM weights and per-gene exogenous shifts.

    Parameters
    ----------
    n_genes : int
        G, measured genes (input/output width).
    n_pert_genes : int
        Size of the perturbation vocabulary (indices of ``pert_genes``; -1 is padding).
    d_inv, d_p, hidden : int
        Invariant and response latent sizes, MLP width.

    """

    def __init__(self, n_genes: int, n_pert_genes: int, d_inv: int = 8, d_p: int = 8, hidden: int = 128) -> None:
        super().__init__()
        self.d_inv, self.d_p = d_inv, d_p
        d = d_inv + d_p
        self.encoder = nn.Sequential(nn.Linear(n_genes, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                     nn.Linear(hidden, 2 * d))
        self.decoder = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                     nn.Linear(hidden, n_genes))
        self.log_tau = nn.Parameter(torch.zeros(n_genes))
        self.a = nn.Parameter(torch.zeros(d_p, d_p))
        self.shift = nn.Embedding(n_pert_genes + 1, d_p, padding_idx=n_pert_genes)
        nn.init.zeros_(self.shift.weight)

    def w(self) -> torch.Tensor:
        """W = I − A with A strictly lower triangular (d_p, d_p)."""
        return torch.eye(self.d_p) - torch.tril(self.a, diagonal=-1)

    def exogenous(self, pert_genes: torch.Tensor) -> torch.Tensor:
        """s_p (..., d_p) from ``pert_genes`` (..., 2) (−1 padding)."""
        idx = torch.where(pert_genes < 0, torch.full_like(pert_genes, self.shift.padding_idx), pert_genes)
        return self.shift(idx).sum(-2)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance (..., d_inv + d_p)."""
        mu, logvar = self.encoder(x).chunk(2, dim=-1)
        return mu, logvar.clamp(-8, 8)

    def prior_sample(self, s: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """z_p = W⁻¹ (s + ε) for exogenous means s (..., d_p)."""
        eps = torch.randn(s.shape, generator=generator)
        return torch.linalg.solve_triangular(self.w(), (s + eps).unsqueeze(-1), upper=False).squeeze(-1)

    def loss(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Negative ELBO per cell (...,) and the invariant posterior means (..., d_inv)."""
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        recon = self.decoder(z)
        nll = 0.5 * (((x - recon) / self.log_tau.exp()) ** 2 + 2 * self.log_tau).sum(-1)
        mu_i, mu_p = mu[..., : self.d_inv], mu[..., self.d_inv:]
        lv_i, lv_p = logvar[..., : self.d_inv], logvar[..., self.d_inv:]
        kl_inv = 0.5 * (mu_i**2 + lv_i.exp() - 1 - lv_i).sum(-1)
        w = self.w()
        trace = (lv_p.exp().unsqueeze(-2) * w**2).sum((-1, -2))
        quad = ((mu_p @ w.T) - s).pow(2).sum(-1)
        kl_p = 0.5 * (trace + quad - self.d_p - lv_p.sum(-1))
        return nll + kl_inv + kl_p, mu_i


class PerturbedVAE(Baseline):
    """PerturbedVAE-style baseline trained on the data module's training batches (CPU, a few thousand steps)."""

    name = "perturbed_vae"

    def __init__(self, steps: int = 2000, lr: float = 2e-3, invariance: float = 0.05, seed: int = 0,
                 **net: int) -> None:
        self.steps, self.lr, self.invariance, self.seed, self.net_kw = steps, lr, invariance, seed, net

    def _fit(self) -> None:
        with torch.random.fork_rng():  # seeded training without touching the caller's global RNG state
            torch.manual_seed(self.seed)
            self.net = PerturbedVAENet(len(self.dm.genes), len(self.dm.perturbation_genes), **self.net_kw)
            self._train()
        self.net.eval()
        self._means: dict[str, np.ndarray] = {}

    def _train(self) -> None:
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        step = 0
        while step < self.steps:
            for batch in self.dm.train_dataloader():
                x_p, x_c = batch["x_pert"], batch["x_ctrl"]  # (C, N, G)
                s = self.net.exogenous(batch["pert_genes"])[:, None, :].expand(-1, x_p.shape[1], -1)
                loss_p, zi_p = self.net.loss(x_p, s)
                loss_c, zi_c = self.net.loss(x_c, torch.zeros_like(s))
                inv = (zi_p.mean(1) - zi_c.mean(1)).pow(2).sum(-1)
                loss = loss_p.mean() + loss_c.mean() + self.invariance * inv.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                if step >= self.steps:
                    return

    @torch.no_grad()
    def sample(self, condition: str, ctrl_cells: np.ndarray) -> np.ndarray:
        """Decoded cells (n, G): z_inv from the real control cells, z_p from the perturbed SCM prior."""
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.as_tensor(np.asarray(ctrl_cells), dtype=torch.float32)
        mu, _ = self.net.encode(x)
        codes = torch.as_tensor([self.dm.encode(condition)], dtype=torch.long)
        s = self.net.exogenous(codes).expand(len(x), -1)
        z = torch.cat([mu[:, : self.net.d_inv], self.net.prior_sample(s, gen)], dim=-1)
        return self.net.decoder(z).numpy().astype(np.float32)

    def delta(self, condition: str) -> np.ndarray:
        key = self.dm.key(condition)
        if key not in self._means:
            ctrl = self.dm.control_matrix(condition)
            self._means[key] = self.sample(condition, ctrl).mean(0) - ctrl.mean(0)
        return self._means[key]
