"""Build the perturbation data module and flow model from a config dict."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from sciml.perturbation.data.datamodule import PerturbationDataModule
from sciml.perturbation.data.table import split_key
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.nn.masking import closure_terms
from sciml.perturbation.nn.shrinkage import JOINT_DENOISER
from sciml.perturbation.select import choose_masking, choose_shrink, double_keys, fit_joint

log = logging.getLogger(__name__)


def datamodule(cfg: dict, run_dir: Path | None = None) -> PerturbationDataModule:
    """The data module of ``cfg["data"]``, set up (read, validated, split, genes selected, graph built)."""
    dm = PerturbationDataModule.from_config(cfg["data"], str(run_dir) if run_dir else None)
    dm.setup()
    return dm


def training_perturbed_genes(dm: PerturbationDataModule) -> list[str]:
    """Genes perturbed (alone or in a combination) in the training split, sorted."""
    return sorted({g for key in dm.conditions["train"] for g in dm.perturbation(key)})


def build(cfg: dict, run_dir: Path | None = None) -> tuple[PerturbationDataModule, PerturbationFlow]:
    """Data module plus a flow model over its gene vocabulary, with the data module's gene graph."""
    dm = datamodule(cfg, run_dir)
    model_cfg = cfg["model"]
    model = PerturbationFlow(network=model_cfg.get("network", {}), genes=list(dm.perturbation_genes),
                             n_measured=len(dm.genes), perturbed_genes=training_perturbed_genes(dm),
                             flow=model_cfg.get("flow"), optim=model_cfg.get("optim"),
                             effect_prior=bool(model_cfg.get("effect_prior", True)))
    model.net.set_graph(dm.gene_graph)
    model.set_single_effects(training_single_effects(dm), training_single_variances(dm))
    if model.flow["prior"] == "masking" and model.flow["denoise"] == JOINT_DENOISER:
        fit_joint(model, dm, double_keys(model, dm, "train"))
    seed = int(cfg.get("seed", 0))
    model.fit_combination(training_doubles(dm), torch.as_tensor(dm.control_matrix().mean(0)), seed)
    if model.flow["shrink"] == "auto":  # the rule's weight over additive, chosen on val (+ cross-fitted train)
        choice = choose_shrink(model, dm, seed=seed)
        model.set_flow(shrink=choice["shrink"])
        log.info("flow.shrink auto: %s (prior-mean MSE per value %s over %s doubles)", choice["shrink"],
                 {k: round(v, 5) for k, v in choice["mse"].items()}, choice["n"])
    if model.flow["prior"] == "masking" and model.flow["closure"] is not False:
        set_closure(model, dm)  # before κ, τ are chosen: they are chosen for the closed prior
    if model.flow["prior"] == "masking" and "auto" in (model.flow["kappa"], model.flow["denoise"]):
        choice = choose_masking(model, dm, seed=seed)
        log.info("flow.prior masking: kappa %s, denoise %s (chosen on %d training + val doubles)", choice["kappa"],
                 choice["denoise"], choice["n"])
    return dm, model


def data_closure(dm: PerturbationDataModule) -> torch.Tensor | None:
    """:func:`~sciml.perturbation.nn.masking.closure_terms` of the control cells; ``None`` when not closed.

    Closed: one control population (a screen of one cell type; with several, each has its own control mean) whose
    cells all have the same ``Σ_g expm1(x_g)`` (every measured gene kept after normalising to a fixed total).
    """
    cell_types = {split_key(key)[1] for keys in dm.conditions.values() for key in keys}
    if len(cell_types) > 1:
        return None
    return closure_terms(torch.as_tensor(dm.control_matrix()))


def set_closure(model: PerturbationFlow, dm: PerturbationDataModule) -> None:
    """Resolve ``flow.closure`` (``auto``: on for closed data; ``true``: required) and set the model's terms."""
    terms = data_closure(dm)
    if terms is None and model.flow["closure"] is True:
        raise ValueError("config model.flow.closure is true, but the control cells of the data are not closed "
                         "(one cell type, the same sum of expm1(x) in every cell); set closure: auto or false")
    model.set_closure(terms)
    log.info("flow.closure: %s", "on (closed data)" if terms is not None else "off (data not closed)")


def training_doubles(dm: PerturbationDataModule) -> list[tuple[int, int, torch.Tensor]]:
    """``(index a, index b, mean effect (G,))`` of the double perturbations in the training split."""
    out = []
    for key in dm.conditions["train"]:
        if len(dm.perturbation(key)) == 2:
            a, b = dm.encode(key)
            delta = dm.cells(key).mean(0) - dm.control_matrix(key).mean(0)
            out.append((a, b, torch.as_tensor(delta, dtype=torch.float32)))
    return out


def training_single_effects(dm: PerturbationDataModule) -> dict[int, torch.Tensor]:
    """``{vocabulary index: mean effect (G,)}`` of the single perturbations in the training split.

    The additive baseline's singles (:class:`~sciml.perturbation.baselines.simple.Additive`): a gene perturbed alone
    in several cell types gets the mean of its effects over them (each against its own cell type's controls), the
    baseline's stand-in for a cell type it was not measured in.
    """
    from sciml.perturbation.baselines.simple import Additive

    index = {g: i for i, g in enumerate(dm.perturbation_genes)}
    return {index[g]: torch.as_tensor(d, dtype=torch.float32) for g, d in Additive().fit(dm).gene_delta.items()}


def training_single_variances(dm: PerturbationDataModule) -> dict[int, torch.Tensor]:
    """``{vocabulary index: squared standard error (G,)}`` of each :func:`training_single_effects` entry.

    Per cell type ``var(cells)/n + var(controls)/n_ctrl``; a gene measured in ``k`` cell types (its effect the mean
    over them) gets the sum over them divided by ``k²``. A condition of one cell has no variance estimate (0).
    """
    from sciml.perturbation.baselines.simple import by_single_gene

    per_gene = by_single_gene(dm, dm.conditions["train"],
                              lambda key: _mean_variance(dm.cells(key)) + _mean_variance(dm.control_matrix(key)))
    index = {g: i for i, g in enumerate(dm.perturbation_genes)}
    return {index[g]: torch.as_tensor(np.sum(v, axis=0) / len(v) ** 2, dtype=torch.float32)
            for g, v in per_gene.items()}


def _mean_variance(x: np.ndarray) -> np.ndarray:
    """Squared standard error ``(G,)`` of the column means of ``x`` ``(n, G)`` (0 for a single row)."""
    return x.var(axis=0, ddof=1) / len(x) if len(x) > 1 else np.zeros(x.shape[1])
