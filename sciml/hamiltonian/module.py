"""HamiltonianModule: Lightning task module training a :class:`~sciml.hamiltonian.model.HamiltonianModel`.

The model (ridge base + equivariant network, :mod:`sciml.hamiltonian.model`) predicts ``ΔH = H − H0``; this
module adds what training needs. The loss is the normalised block MSE plus an energy term
(:func:`~sciml.hamiltonian.loss.hamiltonian_loss`): molecules, the generalised eigenvalues of the assembled
matrix (orbital energies); crystals, the band energies at the generator's SCF k-mesh; molecules optionally the
first-order density error (``loss.density``). ``val_mae`` (model selection) is the MAE of H matrix entries in
µHartree; ``val_density`` the mean ‖δD‖_F (electrons).
"""

from __future__ import annotations

import lightning as L
import torch

from sciml.hamiltonian.loss import (
    block_mae,
    channel_weights,
    density_error,
    hamiltonian_loss,
    matrix_mae,
    orbital_energies,
)
from sciml.hamiltonian.model import HamiltonianModel, attach_base
from sciml.hamiltonian.units import HARTREE_MEV


class HamiltonianModule(HamiltonianModel, L.LightningModule):
    """Train a Hamiltonian model with real-space + orbital-energy loss.

    Parameters
    ----------
    network, layout, stats, meta, ridge, overlap_filter, input_clip, readout_cutoff
        The model's (:class:`~sciml.hamiltonian.model.HamiltonianModel`).
    loss : dict
        ``real``, ``eig``, ``eig_scale`` weights (see :func:`hamiltonian_loss`), ``real_scale_power``
        (0: every normalised irrep instance alike; 2: squared error in Hartree; see :func:`channel_weights`) and
        ``density`` (molecules: weight of the squared first-order density error, :func:`density_error`; 0 = off).
    optim : dict
        ``lr``, ``weight_decay``, ``scheduler`` (``cosine``, ``onecycle`` or ``none``), ``min_lr_ratio``.

    """

    weight_keys = ("network", "layout")  # what fine-tuning (init_from) must share: the orbitals of each element

    def __init__(self, network: dict, layout: dict, stats: dict | None = None, loss: dict | None = None,
                 optim: dict | None = None, meta: dict | None = None, ridge: dict | None = None,
                 overlap_filter: float | None = None, input_clip: float | None = None,
                 readout_cutoff: list | None = None) -> None:
        super().__init__(network, layout, stats, meta, ridge, overlap_filter, input_clip, readout_cutoff, loss=loss,
                         optim=optim)
        self.save_hyperparameters()
        self.loss_weights = {"real": 1.0, "eig": 0.0, "eig_scale": 1e-3, "real_scale_power": 0.0,
                             "density": 0.0} | (loss or {})
        self.optim = {"lr": 2e-3, "weight_decay": 0.0, "scheduler": "cosine", "min_lr_ratio": 0.01} | (optim or {})

    def _step(self, batch, stage: str) -> torch.Tensor:
        out = self.outputs(batch)
        sel, nt, et = batch.net_edge, batch.node_type, batch.edge_type[batch.net_edge]
        yn, ye = self.targets(batch)
        target = (self.norms["y_node"].normalize(yn - out["base_node"], nt),
                  self.norms["y_edge"].normalize((ye - out["base_edge"])[sel], et))
        need_eig = self.loss_weights["eig"] > 0 or stage != "train"
        masks = ((self.node_mask & self.norms["y_node"].alive())[nt],
                 (self.edge_mask & self.norms["y_edge"].alive())[et])
        density = None
        if batch.periodic:
            if self.loss_weights["density"] > 0:
                raise ValueError("model.loss.density is a molecule term (the Γ-point density); set it to 0 for "
                                 "crystals")
            eps, ref = (self.bands(batch, out) if need_eig else None) or (None, None)
            if eps is None and self.loss_weights["eig"] > 0:
                raise ValueError("crystal without kpts / n_occupied in its meta (info.json): the band loss needs "
                                 "them; regenerate with `sciml data hamiltonian --crystal` or set model.loss.eig: 0")
            hn, he = self.h_irreps(batch, out)
            mae = block_mae(hn.detach() - batch.h_node, he.detach() - batch.h_edge, nt, batch.edge_type,
                            self.node_basis, self.edge_basis) * 1e6
        else:
            h = self.matrices(batch, out)
            eps, ref = (orbital_energies(h, batch) if need_eig else None), batch.y
            mae = matrix_mae(h.detach(), batch.h, batch).mean() * 1e6
            if self.loss_weights["density"] > 0 or stage != "train":
                density = density_error(h, batch.h, batch)
        cw = channel_weights((self.norms["y_node"].std, self.norms["y_edge"].std),
                             self.loss_weights["real_scale_power"])
        loss = hamiltonian_loss((out["node"].double(), out["edge"].double()), target, masks, eps, ref,
                                self.loss_weights, (cw[0][nt], cw[1][et]), density)
        n = batch.num_graphs
        self.log(f"{stage}_loss", loss["loss"], prog_bar=stage == "train", batch_size=n, sync_dist=True)
        self.log(f"{stage}_mae", mae, prog_bar=stage != "train", batch_size=n, sync_dist=True)
        if density is not None:
            self.log(f"{stage}_density", density.detach().sqrt().mean(), batch_size=n, sync_dist=True)
        if eps is not None:
            eig_mae = (eps.detach() - ref).abs().mean() * HARTREE_MEV
            self.log(f"{stage}_eig_mae_mev", eig_mae, batch_size=n, sync_dist=True)
        return loss["loss"]

    def on_train_start(self) -> None:
        """Store the ridge's ΔH in the train and val samples of the data module, once per fit.

        :func:`~sciml.hamiltonian.model.attach_base`, after any checkpoint or ``init_from`` weights are in.
        """
        dm = getattr(self.trainer, "datamodule", None)
        for name in ("train", "val"):
            if name in getattr(dm, "datasets", {}):
                attach_base(dm.datasets[name], self, dm.collate_fn)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self):
        o = self.optim
        opt = torch.optim.AdamW(self.parameters(), lr=o["lr"], weight_decay=o["weight_decay"])
        steps = max(int(self.trainer.estimated_stepping_batches), 1)
        if o["scheduler"] == "none":
            return opt
        if o["scheduler"] == "onecycle":
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=o["lr"], total_steps=steps, pct_start=0.05)
        else:
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=o["lr"] * o["min_lr_ratio"])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
