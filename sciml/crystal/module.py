"""CrystalRegressor: Lightning task module training a :class:`~sciml.crystal.model.CrystalModel`."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from sciml.core import keys
from sciml.crystal.ensemble import first_member
from sciml.crystal.model import CrystalModel, current_network

LOSSES = {"l1": nn.functional.l1_loss, "mse": nn.functional.mse_loss, "huber": nn.functional.huber_loss}


class CrystalRegressor(CrystalModel, L.LightningModule):
    """Train a crystal network on a scalar target (the model: :class:`~sciml.crystal.model.CrystalModel`).

    Parameters
    ----------
    network, graph, target, elements
        The model's; retired network keys are left out of the saved hyperparameters.
    optim : dict
        ``lr``, ``weight_decay``, ``loss`` (l1, mse, huber), ``scheduler`` (``cosine`` or ``none``).

    """

    weight_keys = ("network", "graph")  # what fine-tuning (init_from) must share; atoms are embedded by Z
    source_weights = staticmethod(first_member)  # init_from an ensemble starts from its first member

    def __init__(self, network: dict, graph: dict, target: dict, elements: list[str],
                 optim: dict | None = None) -> None:
        network = current_network(network)
        super().__init__(network, graph, target, elements, optim=optim)
        self.save_hyperparameters()  # reads the arguments as they are now: without the retired keys
        self.optim = {"lr": 1e-3, "weight_decay": 1e-5, "loss": "l1", "scheduler": "cosine"} | (optim or {})
        self.loss_fn = LOSSES[self.optim["loss"]]

    def _standardised_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss on the standardised target and absolute errors ``(n_graphs,)`` in the target unit.

        Zero-inflated targets: binary cross-entropy of ``y = 0`` plus the regression loss on the ``y > 0`` rows.
        """
        t, scale, y = self.target, self._scale(batch), batch[keys.TARGET]
        out = self.net(batch)
        z_true = (y / scale - t["mean"]) / t["std"]
        if not self.zero_inflated:
            return self.loss_fn(out, z_true), (self._denormalise(out, scale) - y).abs()
        zero = (y <= 0).to(out.dtype)
        loss = nn.functional.binary_cross_entropy_with_logits(out[:, 0], zero)
        positive = zero == 0
        if positive.any():
            loss = loss + self.loss_fn(out[positive, 1], z_true[positive])
        value = self._denormalise(out[:, 1], scale).clamp_min(0.0)
        return loss, (torch.where(out[:, 0] >= 0, torch.zeros_like(value), value) - y).abs()

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, err = self._standardised_loss(batch)
        n = len(err)
        self.log("train_loss", loss, prog_bar=True, batch_size=n, sync_dist=True)
        self.log("train_mae", err.mean(), batch_size=n, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        loss, err = self._standardised_loss(batch)
        self.log("val_loss", loss, batch_size=len(err), sync_dist=True)
        self.log("val_mae", err.mean(), prog_bar=True, batch_size=len(err), sync_dist=True)

    def test_step(self, batch, batch_idx: int) -> None:
        _, err = self._standardised_loss(batch)
        self.log("test_mae", err.mean(), batch_size=len(err), sync_dist=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.optim["lr"], weight_decay=self.optim["weight_decay"])
        if self.optim["scheduler"] == "none":
            return opt
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.optim["lr"], total_steps=max(int(steps), 1),
                                                    pct_start=0.05)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
