"""Load a crystal artifact into a ready-to-use predictor with its frozen graph settings and calibrator."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from sciml.core.io.artifact import ArtifactError, load_artifact, parse_extra, restore_module
from sciml.core.io.checksum import sha256_file
from sciml.core.io.shipped import shipped_path
from sciml.crystal.calibration import ensure_group_function
from sciml.crystal.data.graphs import GraphSettings
from sciml.crystal.domain import FILE as DOMAIN_FILE
from sciml.crystal.domain import CrystalDomain
from sciml.crystal.model import CrystalModel
from sciml.uq.split import calibrator_from_dict

DEFAULT_MODEL = shipped_path("checkpoints/mp-formation-energy")


@dataclass
class CrystalPredictor:
    """A crystal model restored from an artifact.

    Attributes
    ----------
    module : CrystalModel
        The network with its target normalisation, in eval mode.
    graph : GraphSettings
        Graph settings used in training (applied unchanged to new inputs).
    calibrator : torch.nn.Module or None
        Fitted conformal calibrator (``None`` when the artifact was exported without ``--calibrate``).
    path : Path
        Artifact folder.
    domain : CrystalDomain or None
        Applicability-domain test and shift-aware calibration data (``domain.json``; ``None`` for artifacts
        exported before it existed).

    """

    module: CrystalModel
    graph: GraphSettings
    calibrator: torch.nn.Module | None
    path: Path
    domain: CrystalDomain | None = None
    shift_current: bool = False  # domain.json's shift scores belong to this calibrator (False after recalibration)

    @property
    def target(self) -> dict:
        """Target description: ``name``, ``unit``, ``extensive``."""
        return self.module.target

    @cached_property
    def elements(self) -> set[str]:
        """Elements seen in training."""
        return set(self.module.elements)


def load_model(path: str | Path = DEFAULT_MODEL, graph: dict | GraphSettings | None = None,
               domain: bool = True) -> CrystalPredictor:
    """Load a crystal artifact.

    Parameters
    ----------
    path : str or Path
        Artifact folder or shipped model name (``"perov5-heat-all"``, :func:`sciml.core.io.shipped.resolve_model`;
        default: the shipped ``mp-formation-energy``).
    graph : dict or GraphSettings, optional
        Graph settings the caller expects; a mismatch with the artifact's is an error, never a silent change.
    domain : bool
        Read ``domain.json`` (``False``: leave it out, e.g. to replace an outdated one with ``add_domain``).

    Raises
    ------
    ArtifactError
        Corrupted or incompatible artifact, a non-crystal artifact, or a graph-settings mismatch.

    """
    art = load_artifact(path, task="crystal")
    stored = GraphSettings.from_stored(art.config["module"]["graph"])
    if GraphSettings.from_stored(art.metadata.get("graph", {})) != stored:
        raise ArtifactError(f"{art.path}: graph settings in config.yaml and metadata.json differ; re-export")
    if graph is not None:
        wanted = graph if isinstance(graph, GraphSettings) else GraphSettings.from_dict(graph)
        if wanted != stored:
            raise ArtifactError(f"{art.path}: requested graph settings {wanted.to_dict()} differ from the ones the "
                                f"model was trained with {stored.to_dict()}; drop the override or retrain")
    module = restore_module(art, CrystalModel)
    if art.calibrator:
        try:
            ensure_group_function(art.calibrator.get("group_by") if isinstance(art.calibrator, dict) else None)
        except ValueError as err:
            raise ArtifactError(f"{art.path / 'calibrator.json'}: {err}; re-export the model") from None
    calibrator = calibrator_from_dict(art.calibrator) if art.calibrator else None
    if not domain:
        return CrystalPredictor(module, stored, calibrator, art.path)
    return CrystalPredictor(module, stored, calibrator, art.path, load_domain(art, module.net),
                            shift_current=_shift_current(art))


def _shift_current(art) -> bool:
    """Whether ``domain.json``'s shift scores belong to the artifact's present ``calibrator.json``."""
    domain = art.extras.get(DOMAIN_FILE)
    return bool(domain) and domain["shift"]["calibrator_sha256"] == sha256_file(art.path / "calibrator.json")


def load_domain(art, net: torch.nn.Module) -> CrystalDomain | None:
    """The validated ``domain.json`` of a loaded artifact (its network ``net``), or ``None`` when it has none."""
    domain = parse_extra(art, DOMAIN_FILE, CrystalDomain.from_dict, "re-export the model or run add_domain")
    if domain is None:
        return None
    if domain.score.dim != embedding_dim(net.head, domain.layer):
        raise ArtifactError(f"{art.path / DOMAIN_FILE}: embedding dimension {domain.score.dim} does not fit the "
                            f"network's {domain.layer!r} layer; re-export the model")
    return domain


def embedding_dim(head: torch.nn.Module, layer: str) -> int:
    """Width of the ``layer`` embedding a network's ``head`` reads (an ensemble's head is its first member's).

    The head's first ``Linear(width, dim)``: the pooled features are its input, the hidden layer its output.
    """
    first = next(m for m in head.modules() if isinstance(m, torch.nn.Linear))
    return first.in_features if layer == "pooled" else first.out_features
