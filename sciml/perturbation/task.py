"""Build the perturbation data module and flow model from a config dict.

:func:`build` reads in one direction: the prior settings (checked before any data is read), the data module, what
the screen measured (:func:`~sciml.perturbation.screen.read_screen`), the model with its singles and rule, the
``auto`` settings chosen on the screen (:func:`~sciml.perturbation.select.resolve`), set on the model once.
"""

from __future__ import annotations

from pathlib import Path

from sciml.perturbation.data.datamodule import PerturbationDataModule
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.progress import note
from sciml.perturbation.screen import read_screen
from sciml.perturbation.select import resolve
from sciml.perturbation.settings import PriorSettings


def datamodule(cfg: dict, run_dir: Path | None = None) -> PerturbationDataModule:
    """The data module of ``cfg["data"]``, set up (read, validated, split, genes selected, graph built)."""
    dm = PerturbationDataModule.from_config(cfg["data"], str(run_dir) if run_dir else None)
    dm.setup()
    return dm


def build(cfg: dict, run_dir: Path | None = None) -> tuple[PerturbationDataModule, PerturbationFlow]:
    """Data module plus a flow model over its gene vocabulary, with the data module's gene graph.

    The model holds the training singles (and, under ``flow.denoise: eb_joint``, the singles fitted jointly with
    the training doubles), its combination rule fitted on the training doubles, and the prior settings with every
    ``auto`` value chosen on training + val (:func:`~sciml.perturbation.select.resolve`).
    """
    model_cfg = cfg["model"]
    settings = PriorSettings.from_flow(model_cfg.get("flow"))  # a bad value fails before any data is read
    note(f"reading {cfg['data'].get('path')}")
    dm = datamodule(cfg, run_dir)
    note(f"read {dm.table.n_cells} cells x {len(dm.genes)} genes; measuring the singles and doubles")
    screen = read_screen(dm)
    seed = int(cfg.get("seed", 0))
    model = PerturbationFlow(network=model_cfg.get("network", {}), genes=list(dm.perturbation_genes),
                             n_measured=len(dm.genes), perturbed_genes=screen.perturbed_genes,
                             flow=model_cfg.get("flow"), optim=model_cfg.get("optim"),
                             effect_prior=bool(model_cfg.get("effect_prior", True)))
    model.net.set_graph(dm.gene_graph)
    model.set_singles(screen.singles)
    note(f"fitting the combination rule on {len(screen.rule_doubles)} training doubles")
    model.fit_combination(screen.rule_doubles, screen.ctrl_mean, seed)
    if settings.auto:
        note(f"choosing the prior's {', '.join(settings.auto)} on training + val doubles")
    resolved = resolve(settings, screen, model.combination, seed)
    model.set_prior(resolved.settings)
    if resolved.joint is not None:
        model.set_joint_singles(resolved.joint)
    if resolved.settings.prior == "masking":
        model.set_closure(screen.closure if resolved.settings.closed else None)
    note(f"prior: {resolved.settings.prior}, shrink {resolved.settings.shrink}, kappa {resolved.settings.kappa}, "
         f"denoise {resolved.settings.denoise}; max_genes {model.flow['max_genes'] or 'all'}; training")
    return dm, model
