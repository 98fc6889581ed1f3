r"""PerturbationFlow: Lightning task module training a :class:`~sciml.perturbation.model.PerturbationModel`.

Loss (scDFM): ``L = ‖v_θ(x_t, t | c) − u_t‖² + λ·MMD²(x̂_1, x_1)`` with the conditional path of
:mod:`sciml.perturbation.nn.flow` and the one-step endpoint ``x̂_1 = x_t + (1 − t)·v_θ``; the MMD is computed
per condition between the ``N`` endpoints and the ``N`` real perturbed cells and averaged. It is the ``mmd``
metric's function (:func:`sciml.perturbation.distances.mmd2`: kernel averaged over the scales, median bandwidth).
Sampling integrates ``dx/dt = v_θ`` from the path's start (noise or control cells) with Euler or RK4.

Batches follow the data-module contract: ``x_pert``, ``x_ctrl`` float32 ``(C, N, G)`` (log1p expression),
``pert_genes`` int64 ``(C, 2)`` (vocabulary indices, −1 padding), ``condition`` list of ``C`` names.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor

from sciml.perturbation.distances import mmd2
from sciml.perturbation.model import FLOW_DEFAULTS, OPTIM_DEFAULTS, PerturbationModel
from sciml.perturbation.settings import PriorSettings

__all__ = ["FLOW_DEFAULTS", "OPTIM_DEFAULTS", "PerturbationFlow"]


class PerturbationFlow(PerturbationModel, L.LightningModule):
    """Train a :class:`~sciml.perturbation.model.PerturbationModel` by conditional flow matching + MMD.

    Parameters
    ----------
    network, genes, n_measured, perturbed_genes, flow, optim, effect_prior
        The model's; saved as the checkpoint's hyperparameters.

    """

    weight_keys = ("network", "genes")  # what fine-tuning (init_from) must share: the gene vocabulary's order

    def __init__(self, network: dict, genes: list[str], n_measured: int | None = None,
                 perturbed_genes: list[str] | None = None, flow: dict | None = None,
                 optim: dict | None = None, effect_prior: bool = True) -> None:
        super().__init__(network, genes, n_measured, perturbed_genes, flow, optim, effect_prior)
        self.save_hyperparameters()

    def set_flow(self, **values) -> None:
        """Change sampling settings after construction (saved with the checkpoint / artifact config)."""
        super().set_flow(**values)
        self.hparams["flow"] = dict(self.hparams.get("flow") or {}) | values

    def set_prior(self, settings: PriorSettings | None = None, **changes) -> None:
        """Replace the prior settings (saved with the checkpoint / artifact config)."""
        super().set_prior(settings, **changes)
        self.hparams["flow"] = dict(self.hparams.get("flow") or {}) | self.prior_settings.to_flow()

    def _subset(self, n_genes: int) -> Tensor | None:
        k = self.flow["max_genes"]
        if not self.training or not k or k >= n_genes:
            return None
        return torch.randperm(n_genes, device=self.device)[:k].sort().values

    def losses(self, batch: dict) -> dict[str, Tensor]:
        """``{"loss", "cfm", "mmd"}`` on one batch."""
        x1, xc, pert = batch["x_pert"], batch["x_ctrl"], batch["pert_genes"]
        genes = self._subset(x1.shape[-1])
        if genes is not None:
            x1, xc = x1[..., genes], xc[..., genes]
        xc = self.path.pair(x1, xc)
        x0 = self.path.initial(xc)
        t = torch.rand(x1.shape[:2], device=x1.device, dtype=x1.dtype)
        xt, u = self.path.interpolate(x0, x1, t)
        v = self.velocity(xt, t, xc, pert, genes)
        cfm = (v - u).pow(2).mean()
        mmd = mmd2(self.path.endpoint(xt, t, v), x1, tuple(self.flow["mmd_scales"])).mean()
        return {"loss": cfm + self.flow["mmd_weight"] * mmd, "cfm": cfm, "mmd": mmd}

    def _log_all(self, stage: str, batch: dict, out: dict[str, Tensor]) -> None:
        c = len(batch["condition"])
        for name, value in out.items():
            self.log(f"{stage}_{name}", value, batch_size=c, prog_bar=name == "loss", sync_dist=stage != "train")

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        out = self.losses(batch)
        self._log_all("train", batch, out)
        return out["loss"]

    def _evaluate(self, batch: dict, stage: str) -> None:
        out = self.losses(batch)
        gen = self.sample(batch["x_ctrl"], batch["pert_genes"], self.flow["val_steps"], "euler")
        out["mae"] = (gen.mean(1) - batch["x_pert"].mean(1)).abs().mean()  # mean-expression MAE (selection metric)
        self._log_all(stage, batch, out)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.optim["lr"], weight_decay=self.optim["weight_decay"])
        if self.optim["scheduler"] == "none":
            return opt
        steps = max(int(self.trainer.estimated_stepping_batches), 1)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.optim["lr"], total_steps=steps, pct_start=0.05)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
