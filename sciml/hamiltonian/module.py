"""HamiltonianModule: Lightning task module predicting Kohn–Sham Hamiltonians with orbital-energy outputs.

The network (:class:`sciml.hamiltonian.nn.HamiltonianNet`) maps H0 block irreps and geometry to normalised
irreps of ``ΔH = H − H0`` (``use_h0: false``: of ``H`` itself, with no H0 input); blocks are assembled into a
symmetric matrix (:func:`sciml.hamiltonian.loss.assemble`) whose generalised eigenvalues are the predicted
orbital energies. ``predict_step`` returns a :class:`~sciml.core.types.Prediction` whose ``mean`` holds the
orbital energies (Hartree, ``n_occupied + n_virtual`` per structure, concatenated) — the quantity the
conformal layer calibrates — and whose ``meta`` holds the predicted matrices.
"""

from __future__ import annotations

import lightning as L
import torch

from sciml.hamiltonian.loss import assemble, hamiltonian_loss, matrix_mae, orbital_energies
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.units import HARTREE_MEV
from sciml.hamiltonian.nn import BlockBasis, HamiltonianNet
from sciml.hamiltonian.nn.normalize import IrrepsNormalizer
from sciml.hamiltonian.nn.ridge import TensorProductRidge
from sciml.core.types import Prediction

DTYPES = {"float32": torch.float32, "float64": torch.float64}


class HamiltonianModule(L.LightningModule):
    """Train a Hamiltonian network with real-space + orbital-energy loss.

    Parameters
    ----------
    network : dict
        Keyword arguments of :class:`HamiltonianNet` other than the irreps/type counts, plus ``use_h0``
        and ``dtype`` (``float32`` or ``float64``).
    layout : dict
        ``OrbitalLayout.to_dict()`` of the training basis.
    stats : dict
        Normalisation statistics from the training split: ``x_node``, ``x_edge``, ``y_node``, ``y_edge``, each
        ``[mean, std]`` nested lists (see :class:`IrrepsNormalizer`).
    loss : dict
        ``real``, ``eig``, ``eig_scale`` weights (see :func:`hamiltonian_loss`).
    optim : dict
        ``lr``, ``weight_decay``, ``scheduler`` (``cosine``, ``onecycle`` or ``none``), ``min_lr_ratio``.
    meta : dict
        Facts stored for prediction: ``basis``, ``xc``, ``cutoff``, ``n_virtual``.
    ridge : dict or None
        Settings and fitted ``shapes`` of the closed-form :class:`TensorProductRidge` base model (with H0
        input only); the network then predicts the residual ``ΔH − ridge`` (``stats`` y_* describe it) from a
        zero-initialised read-out, so training starts at the closed-form solution.

    """

    def __init__(self, network: dict, layout: dict, stats: dict, loss: dict | None = None,
                 optim: dict | None = None, meta: dict | None = None, ridge: dict | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layout = OrbitalLayout.from_dict(layout)
        zs = self.layout.elements()
        self.node_basis = BlockBasis(self.layout.shells, [(z, z) for z in zs])
        self.edge_basis = BlockBasis(self.layout.shells, [(a, b) for a in zs for b in zs])
        kwargs = {k: v for k, v in network.items() if k not in ("dtype",)}
        self.use_h0 = bool(kwargs.get("use_h0", True))
        self.net = HamiltonianNet(str(self.node_basis.irreps), str(self.edge_basis.irreps), len(self.node_basis.pairs),
                                  len(self.edge_basis.pairs), **kwargs)
        self.net.to(DTYPES[network.get("dtype", "float32")])
        self.norms = torch.nn.ModuleDict({k: IrrepsNormalizer(*stats[k]) for k in ("x_node", "x_edge", "y_node",
                                                                                    "y_edge")})
        # components each type uses; the loss also skips channels constant in the training targets (σ = 0)
        self.register_buffer("node_mask", torch.stack([self.node_basis.mask(*p) for p in self.node_basis.pairs]))
        self.register_buffer("edge_mask", torch.stack([self.edge_basis.mask(*p) for p in self.edge_basis.pairs]))
        self.ridge = None
        if ridge and self.use_h0:
            self.ridge = TensorProductRidge.from_settings(self.node_basis, self.edge_basis, ridge)
            with torch.no_grad():
                for lin in (self.net.node_out, self.net.edge_out):
                    lin.weight.zero_()
        self.loss_weights = {"real": 1.0, "eig": 0.0, "eig_scale": 1e-3} | (loss or {})
        self.optim = {"lr": 2e-3, "weight_decay": 0.0, "scheduler": "cosine", "min_lr_ratio": 0.01} | (optim or {})

    @property
    def dtype_(self) -> torch.dtype:
        return next(self.net.parameters()).dtype

    def targets(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw target irreps (Hartree): ``H − H0`` with H0 input, else ``H``."""
        if self.use_h0:
            return batch.h_node - batch.x_node, batch.h_edge - batch.x_edge
        return batch.h_node, batch.h_edge

    def base(self, batch, vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form ΔH irreps of the ridge model (Hartree), zeros without one."""
        if self.ridge is None:
            return torch.zeros_like(batch.x_node), torch.zeros_like(batch.x_edge)
        return self.ridge(batch.x_node, batch.x_edge, vec, batch.edge_index, batch.node_type, batch.edge_type)

    def outputs(self, batch):
        """``(H_flat (F,) float64, node_norm (N, Dn), edge_norm (E, De), base_node, base_edge)``."""
        dt = self.dtype_
        vec64 = self.net.edge_vectors(batch.pos.double(), batch.edge_index)
        xn = self.norms["x_node"].normalize(batch.x_node, batch.node_type).to(dt)
        xe = self.norms["x_edge"].normalize(batch.x_edge, batch.edge_type).to(dt)
        node, edge = self.net(batch.node_type, batch.edge_type, vec64.to(dt), batch.edge_index, xn, xe)
        node = node * self.node_mask[batch.node_type]
        edge = edge * self.edge_mask[batch.edge_type]
        bn, be = self.base(batch, vec64)
        dn = (self.norms["y_node"].denormalize(node, batch.node_type) + bn) * self.node_mask[batch.node_type]
        de = (self.norms["y_edge"].denormalize(edge, batch.edge_type) + be) * self.edge_mask[batch.edge_type]
        h = assemble(dn, de, batch, self.node_basis, self.edge_basis, base=batch.h0 if self.use_h0 else None)
        return h, node, edge, bn, be

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(H_flat (F,) float64 Hartree, node_norm (N, Dn), edge_norm (E, De))``."""
        return self.outputs(batch)[:3]

    def _step(self, batch, stage: str) -> torch.Tensor:
        h, node, edge, bn, be = self.outputs(batch)
        yn, ye = self.targets(batch)
        yn, ye = yn - bn, ye - be
        target = (self.norms["y_node"].normalize(yn, batch.node_type),
                  self.norms["y_edge"].normalize(ye, batch.edge_type))
        need_eig = self.loss_weights["eig"] > 0 or stage != "train"
        eps = orbital_energies(h, batch) if need_eig else None
        masks = ((self.node_mask & self.norms["y_node"].alive())[batch.node_type],
                 (self.edge_mask & self.norms["y_edge"].alive())[batch.edge_type])
        out = hamiltonian_loss((node.double(), edge.double()), target, masks, eps, batch.y, self.loss_weights)
        n = batch.num_graphs
        mae = matrix_mae(h.detach(), batch.h, batch).mean() * 1e6
        self.log(f"{stage}_loss", out["loss"], prog_bar=stage == "train", batch_size=n, sync_dist=True)
        self.log(f"{stage}_mae", mae, prog_bar=stage != "train", batch_size=n, sync_dist=True)
        if eps is not None:
            eig_mae = (eps.detach() - batch.y).abs().mean() * HARTREE_MEV
            self.log(f"{stage}_eig_mae_mev", eig_mae, batch_size=n, sync_dist=True)
        return out["loss"]

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")

    def predict_step(self, batch, batch_idx: int = 0) -> Prediction:
        """Orbital energies (Hartree) as ``mean``; ``meta['hamiltonian']`` the flattened matrices (e3nn order)."""
        with torch.no_grad():
            h, _, _ = self(batch)
            eps = orbital_energies(h, batch)
        return Prediction(mean=eps, meta={"unit": "hartree", "hamiltonian": h, "n_ao": batch.n_ao,
                                          "n_eig": batch.n_eig, "n_occ": batch.n_occ})

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
