"""Build the Hamiltonian data module and Lightning module from a config dict (molecules and crystals alike)."""

from __future__ import annotations

from pathlib import Path

import torch

from sciml.hamiltonian.data.datamodule import HamiltonianDataModule
from sciml.hamiltonian.module import HamiltonianModule
from sciml.hamiltonian.nn.normalize import IrrepsMoments
from sciml.hamiltonian.nn.ridge import TensorProductRidge


def datamodule(cfg: dict, run_dir: Path | None = None) -> HamiltonianDataModule:
    """The data module of ``cfg["data"]``, set up (read, featurised, split)."""
    dm = HamiltonianDataModule(**cfg["data"], run_dir=str(run_dir) if run_dir else None)
    dm.setup()
    return dm


#: training structures per batch when the train split is summarised (ridge fit, normalisation statistics): bounded
#: memory for a training set of any size
SUMMARY_CHUNK = 32


def train_batches(dm: HamiltonianDataModule, chunk: int = SUMMARY_CHUNK):
    """The training structures (molecules or crystals) as consecutive batches of at most ``chunk``."""
    train = dm.datasets["train"]
    if not train:
        raise ValueError(f"data.path {dm.path}: the train split is empty ({dm.split_sizes()}); add structures or "
                         "change data.split.fractions")
    for k in range(0, len(train), chunk):
        yield dm.collate_fn(train[k:k + chunk])


def ridge_masks(dm: HamiltonianDataModule) -> tuple[torch.Tensor, torch.Tensor]:
    """``(node, edge)`` bool ``(n_types, dim)``: the output channels each item type has (the ridge fits those)."""
    nb, eb = dm.node_basis, dm.edge_basis
    return torch.stack([nb.mask(*p) for p in nb.pairs]), torch.stack([eb.mask(*p) for p in eb.pairs])


def fit_ridge(dm: HamiltonianDataModule, settings: dict) -> TensorProductRidge:
    """The closed-form tensor-product ridge model of ΔH fitted on every block of the train split (float64).

    The normal equations are summed over chunks of :data:`SUMMARY_CHUNK` structures, so memory does not grow with
    the training set.
    """
    nb, eb = dm.node_basis, dm.edge_basis
    ridge = TensorProductRidge.from_settings(nb, eb, {k: v for k, v in settings.items() if k != "shapes"})
    masks, normal = ridge_masks(dm), {}
    for b in train_batches(dm):
        ridge.accumulate(normal, b.x_node, b.x_edge, b.vectors(), b.edge_index, b.node_type, b.edge_type,
                         b.h_node - b.x_node, b.h_edge - b.x_edge, masks)
    ridge.solve(normal, lam=float(settings.get("lam", 1e-6)))
    return ridge


def normalisation_stats(dm: HamiltonianDataModule, use_h0: bool, ridge: TensorProductRidge | None = None) -> dict:
    """Per-type irreps statistics of the inputs (H0) and targets (ΔH, or H without H0) on the train split.

    Over the atoms and the network edges (``net_edge``). With a ridge base model the target statistics
    describe the residual ``ΔH − ridge``. The one place the normalisers' statistics are computed; summed over
    chunks of :data:`SUMMARY_CHUNK` structures (:class:`~sciml.hamiltonian.nn.normalize.IrrepsMoments`).
    """
    bases = {"node": dm.node_basis, "edge": dm.edge_basis}
    moments = {f"{v}_{kind}": IrrepsMoments(len(basis.pairs), basis.irreps.dim) for v in ("x", "y")
               for kind, basis in bases.items()}
    for b in train_batches(dm):
        yn, ye = (b.h_node - b.x_node, b.h_edge - b.x_edge) if use_h0 else (b.h_node, b.h_edge)
        if ridge is not None:
            with torch.no_grad():
                bn, be = ridge(b.x_node, b.x_edge, b.vectors(), b.edge_index, b.node_type, b.edge_type)
            yn, ye = yn - bn, ye - be
        sel = b.net_edge
        moments["x_node"].add(b.x_node, b.node_type)
        moments["x_edge"].add(b.x_edge[sel], b.edge_type[sel])
        moments["y_node"].add(yn, b.node_type)
        moments["y_edge"].add(ye[sel], b.edge_type[sel])
    return {name: m.statistics(bases[name[2:]].irreps) for name, m in moments.items()}


def build(cfg: dict, run_dir: Path | None = None) -> tuple[HamiltonianDataModule, HamiltonianModule]:
    """Data module plus a module whose normalisation, ridge base and orbital layout come from the train split."""
    dm = datamodule(cfg, run_dir)
    network = dict(cfg["model"]["network"])
    use_h0 = bool(network.get("use_h0", True))
    settings = cfg["model"].get("ridge")
    ridge = fit_ridge(dm, settings) if settings and use_h0 else None
    stats = normalisation_stats(dm, use_h0, ridge)
    meta = dict(dm.meta) | {"cutoff": dm.cutoff, "n_virtual": dm.n_virtual}
    module = HamiltonianModule(network=network, layout=dm.layout.to_dict(), stats=stats, loss=cfg["model"].get("loss"),
                               optim=cfg["model"].get("optim"), meta=meta,
                               ridge=dict(settings, shapes=ridge.shapes) if ridge is not None else None,
                               overlap_filter=cfg["model"].get("overlap_filter"),
                               input_clip=cfg["model"].get("input_clip"),
                               readout_cutoff=cfg["model"].get("readout_cutoff"))
    if ridge is not None:
        module.ridge.load_state_dict(ridge.state_dict(), strict=True)
    return dm, module
