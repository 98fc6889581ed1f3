"""Build the perturbation data module and flow model from a config dict."""

from __future__ import annotations

from pathlib import Path

from sciml.cells.datamodule import PerturbationDataModule
from sciml.models.perturbation import PerturbationFlow


def perturbation_datamodule(cfg: dict, run_dir: Path | None = None) -> PerturbationDataModule:
    """The data module of ``cfg["data"]``, set up (read, validated, split, genes selected, graph built)."""
    dm = PerturbationDataModule.from_config(cfg["data"], str(run_dir) if run_dir else None)
    dm.setup()
    return dm


def training_perturbed_genes(dm: PerturbationDataModule) -> list[str]:
    """Genes perturbed (alone or in a combination) in the training split, sorted."""
    return sorted({g for key in dm.conditions["train"] for g in dm.perturbation(key)})


def build_perturbation(cfg: dict, run_dir: Path | None = None) -> tuple[PerturbationDataModule, PerturbationFlow]:
    """Data module plus a flow model over its gene vocabulary, with the data module's gene graph."""
    dm = perturbation_datamodule(cfg, run_dir)
    model_cfg = cfg["model"]
    model = PerturbationFlow(network=model_cfg.get("network", {}), genes=list(dm.perturbation_genes),
                             n_measured=len(dm.genes), perturbed_genes=training_perturbed_genes(dm),
                             flow=model_cfg.get("flow"), optim=model_cfg.get("optim"))
    model.net.set_graph(dm.gene_graph)
    return dm, model
