"""Load a perturbation artifact into a predictor: flow model, vocabularies, data conventions, effect bands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sciml.core.io.artifact import ArtifactError, load_artifact, parse_extra, restore_module
from sciml.core.io.shipped import shipped_path
from sciml.perturbation.data.conditions import MAX_GENES, UnknownGeneError, format_condition, parse_condition
from sciml.perturbation.domain import FILE as DOMAIN_FILE
from sciml.perturbation.domain import PerturbationDomain
from sciml.perturbation.model import PerturbationModel
from sciml.perturbation.uncertainty import EffectBands

DEFAULT_MODEL = shipped_path("checkpoints/grn-default")


@dataclass
class PerturbationPredictor:
    """A perturbation model restored from an artifact.

    Attributes
    ----------
    module : PerturbationModel
        The flow model in eval mode.
    data : dict
        Data conventions frozen at training time (``PerturbationDataModule.to_dict()``: genes, control label...).
    bands : EffectBands or None
        Conformal effect bands (``None`` when exported without ``--calibrate``).
    path : Path
        Artifact folder.
    domain : PerturbationDomain or None
        Applicability domain (``domain.json``; ``None`` for an artifact without one).

    """

    module: PerturbationModel
    data: dict
    bands: EffectBands | None
    path: Path
    domain: PerturbationDomain | None = None

    @property
    def genes(self) -> list[str]:
        """Measured genes, in the column order of inputs and outputs."""
        return self.module.measured_genes

    @property
    def vocabulary(self) -> dict[str, int]:
        """Gene → index of the perturbation vocabulary (measured genes first)."""
        return {g: i for i, g in enumerate(self.module.config["genes"])}

    def encode(self, label: str) -> tuple[str, list[int], str]:
        """``(canonical label, pert_genes row, note)`` of a condition label such as ``A+B``, ``A`` or ``A+ctrl``.

        Raises
        ------
        ValueError
            More than two genes: the model predicts single and double perturbations only.
        UnknownGeneError
            A gene outside the vocabulary, or one never perturbed in training that has no graph embedding
            (not measured, so not in the gene graph).

        """
        genes = parse_condition(label, self.data.get("control_label", "ctrl"))
        if len(genes) > MAX_GENES:
            raise ValueError(f"--perturbations {label!r}: {len(genes)} genes; the model {self.path} predicts single "
                             f"and double perturbations (A, A+B), not combinations of {len(genes)}")
        vocab, measured = self.vocabulary, set(self.genes)
        seen = set(self.module.config["perturbed_genes"] or [])
        unknown = [g for g in genes if g not in vocab]
        if unknown:
            raise UnknownGeneError(f"--perturbations {label!r}: unknown gene(s) {', '.join(unknown)}: not among the "
                                   f"{len(vocab)} genes of the model {self.path}; use gene symbols the model knows")
        blind = [g for g in genes if g not in seen and g not in measured]
        if blind:
            raise UnknownGeneError(f"--perturbations {label!r}: gene(s) {', '.join(blind)} were never perturbed in "
                                   f"training and are not measured, so the model {self.path} has no embedding for "
                                   "them")
        unseen = [g for g in genes if g not in seen]
        note = f"not perturbed in training: {' '.join(unseen)} (graph embedding only)" if unseen else ""
        row = [vocab[g] for g in genes] + [-1] * (MAX_GENES - len(genes))
        return format_condition(genes), row, note


def load_model(path: str | Path = DEFAULT_MODEL) -> PerturbationPredictor:
    """Load a perturbation artifact (default: the shipped ``checkpoints/grn-default``).

    Raises
    ------
    ArtifactError
        Missing, corrupted or incompatible artifact, or an artifact of another task.

    """
    art = load_artifact(path, task="perturbation")
    module = restore_module(art, PerturbationModel)
    try:
        bands = EffectBands.from_dict(art.calibrator) if art.calibrator else None
    except (ValueError, KeyError, TypeError) as err:
        raise ArtifactError(f"{art.path / 'calibrator.json'}: {err}") from None
    domain = parse_extra(art, DOMAIN_FILE, PerturbationDomain.from_dict,
                         "re-export, or run `sciml perturbation calibrate --operation domain`")
    return PerturbationPredictor(module, art.metadata.get("data", {}), bands, art.path, domain)


__all__ = ["DEFAULT_MODEL", "PerturbationPredictor", "UnknownGeneError", "load_model"]
