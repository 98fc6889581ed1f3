"""CrystalRegressor: Lightning task module for scalar crystal properties."""

from __future__ import annotations

import lightning as L
import torch
from pymatgen.core import Element
from torch import nn

from sciml.core import keys
from sciml.core.types import Prediction
from sciml.crystal.calibration import graph_structures
from sciml.crystal.data.graphs import GraphSettings
from sciml.crystal.nn import NETWORKS

EMBEDDING_LAYERS = ("pooled", "hidden")
LOSSES = {"l1": nn.functional.l1_loss, "mse": nn.functional.mse_loss, "huber": nn.functional.huber_loss}
# Network settings that no longer exist, with why. Artifacts and checkpoints written before carry them: they are
# dropped here (weights are unaffected: the setting created no parameters); new configs should not name them.
RETIRED_NETWORK_KEYS = {"heads": "PRDNet's graph attention is per channel; `heads` never changed the network"}


def current_network(network: dict) -> dict:
    """``network`` settings without :data:`RETIRED_NETWORK_KEYS` (for artifacts and checkpoints written before)."""
    return {k: v for k, v in network.items() if k not in RETIRED_NETWORK_KEYS}


class CrystalRegressor(L.LightningModule):
    """Train a crystal network on a scalar target, with normalisation frozen from the training split.

    The network predicts a standardised intensive value ``z``; the target is ``ŷ = (z·σ + μ)·n`` with
    ``n = n_atoms`` for extensive targets (eV per cell) and ``n = 1`` otherwise.

    Parameters
    ----------
    network : dict
        ``name`` (key of :data:`sciml.crystal.nn.NETWORKS`) and keyword arguments of that network; retired keys
        (:data:`RETIRED_NETWORK_KEYS`, e.g. ``heads``) are dropped, and left out of the saved hyperparameters.
    graph : dict
        Graph settings the data were built with (:class:`~sciml.crystal.data.graphs.GraphSettings`).
    target : dict
        ``name``, ``unit``, ``extensive``, ``mean``, ``std`` (statistics of the training split).
    elements : list of str
        Elements seen in training; others are predicted from their descriptors only and flagged.
    optim : dict
        ``lr``, ``weight_decay``, ``loss`` (l1, mse, huber), ``scheduler`` (``cosine`` or ``none``).

    """

    def __init__(self, network: dict, graph: dict, target: dict, elements: list[str],
                 optim: dict | None = None) -> None:
        super().__init__()
        network = current_network(network)
        self.save_hyperparameters()  # reads the arguments as they are now: without the retired keys
        self.graph = GraphSettings.from_dict(graph)
        kwargs = {k: v for k, v in network.items() if k != "name"}
        if network["name"] not in NETWORKS:
            raise ValueError(f"unknown network {network['name']!r}; known: {sorted(NETWORKS)}")
        self.net = NETWORKS[network["name"]](cutoff=self.graph.cutoff, g_max=self.graph.g_max, **kwargs)
        self.net.encoder.restrict_to([Element(e).Z for e in elements])
        self.optim = {"lr": 1e-3, "weight_decay": 1e-5, "loss": "l1", "scheduler": "cosine"} | (optim or {})
        self.loss_fn = LOSSES[self.optim["loss"]]

    def _scale(self, batch) -> torch.Tensor:
        n = batch[keys.N_ATOMS].to(batch[keys.POS].dtype)
        return n if self.hparams.target["extensive"] else torch.ones_like(n)

    def _denormalise(self, z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        t = self.hparams.target
        return (z * t["std"] + t["mean"]) * scale

    def forward(self, batch) -> torch.Tensor:
        """Predicted target per structure, shape ``(n_graphs,)``, in the target unit."""
        return self._denormalise(self.net(batch), self._scale(batch))

    def embed(self, batch, layer: str = "pooled") -> torch.Tensor:
        """Learned representation of each structure, shape ``(n_graphs, d)``, for the applicability domain.

        Parameters
        ----------
        batch : torch_geometric.data.Batch
            Crystal graphs.
        layer : str
            ``"pooled"``: the pooled structure features the head reads (PRDNet: ``[mean_j h_j ; D]``,
            ``d = 2·dim``); ``"hidden"``: the head's hidden layer after its activation (``d = dim``).
            Both are invariant to rotation, translation, atom order and cell choice.

        """
        if layer not in EMBEDDING_LAYERS:
            raise ValueError(f"unknown embedding layer {layer!r}; use one of {EMBEDDING_LAYERS}")
        z = self.net.embed(batch)
        return self.net.head[:-1](z) if layer == "hidden" else z

    def _standardised_loss(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        t, scale = self.hparams.target, self._scale(batch)
        z = self.net(batch)
        z_true = (batch[keys.TARGET] / scale - t["mean"]) / t["std"]
        return self.loss_fn(z, z_true), (self._denormalise(z, scale) - batch[keys.TARGET]).abs()

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

    def batch_items(self, batch) -> list:
        """The structures of ``batch``, for calibrators that group by structure (:mod:`sciml.crystal.calibration`)."""
        return graph_structures(batch)

    def predict_step(self, batch, batch_idx: int = 0) -> Prediction:
        return Prediction(mean=self(batch), sigma=self._scale(batch),
                          meta={"target": self.hparams.target["name"], "unit": self.hparams.target["unit"]})

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.optim["lr"], weight_decay=self.optim["weight_decay"])
        if self.optim["scheduler"] == "none":
            return opt
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.optim["lr"], total_steps=max(int(steps), 1),
                                                    pct_start=0.05)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
