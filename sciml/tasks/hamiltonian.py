"""Build the Hamiltonian data module and Lightning module from a config dict."""

from __future__ import annotations

from pathlib import Path

from sciml.hamiltonian.data import HamiltonianDataModule, collate
from sciml.models.hamiltonian import HamiltonianModule
from sciml.nn.hamiltonian.normalize import IrrepsNormalizer


def hamiltonian_datamodule(cfg: dict, run_dir: Path | None = None) -> HamiltonianDataModule:
    """The data module of ``cfg["data"]``, set up (read, featurised, split)."""
    dm = HamiltonianDataModule(**cfg["data"], run_dir=str(run_dir) if run_dir else None)
    dm.setup()
    return dm


def normalisation_stats(dm: HamiltonianDataModule, use_h0: bool) -> dict:
    """Per-type irreps statistics of the inputs (H0) and targets (ΔH, or H without H0) on the train split."""
    b = collate(dm.datasets["train"])
    yn, ye = (b.h_node - b.x_node, b.h_edge - b.x_edge) if use_h0 else (b.h_node, b.h_edge)
    nb, eb = dm.node_basis, dm.edge_basis
    stat = IrrepsNormalizer.statistics
    return {"x_node": stat(b.x_node, b.node_type, nb.irreps, len(nb.pairs)),
            "x_edge": stat(b.x_edge, b.edge_type, eb.irreps, len(eb.pairs)),
            "y_node": stat(yn, b.node_type, nb.irreps, len(nb.pairs)),
            "y_edge": stat(ye, b.edge_type, eb.irreps, len(eb.pairs))}


def build_hamiltonian(cfg: dict, run_dir: Path | None = None) -> tuple[HamiltonianDataModule, HamiltonianModule]:
    """Data module plus a module whose normalisation and orbital layout come from the train split."""
    dm = hamiltonian_datamodule(cfg, run_dir)
    network = dict(cfg["model"]["network"])
    stats = normalisation_stats(dm, bool(network.get("use_h0", True)))
    meta = dict(dm.meta) | {"cutoff": dm.cutoff, "n_virtual": dm.n_virtual}
    module = HamiltonianModule(network=network, layout=dm.layout.to_dict(), stats=stats, loss=cfg["model"].get("loss"),
                               optim=cfg["model"].get("optim"), meta=meta)
    return dm, module
