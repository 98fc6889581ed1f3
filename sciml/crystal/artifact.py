"""Load a crystal artifact into a ready-to-use predictor with its frozen graph settings and calibrator."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from sciml.core.io.artifact import ArtifactError, load_artifact, restore_module
from sciml.core.io.shipped import shipped_path
from sciml.crystal.data.graphs import GraphSettings
from sciml.crystal.module import CrystalRegressor
from sciml.uq.split import calibrator_from_dict

DEFAULT_MODEL = shipped_path("checkpoints/perov5-heat-all")


@dataclass
class CrystalPredictor:
    """A crystal model restored from an artifact.

    Attributes
    ----------
    module : CrystalRegressor
        The network with its target normalisation, in eval mode.
    graph : GraphSettings
        Graph settings used in training (applied unchanged to new inputs).
    calibrator : torch.nn.Module or None
        Fitted conformal calibrator (``None`` when the artifact was exported without ``--calibrate``).
    path : Path
        Artifact folder.

    """

    module: CrystalRegressor
    graph: GraphSettings
    calibrator: torch.nn.Module | None
    path: Path

    @property
    def target(self) -> dict:
        """Target description: ``name``, ``unit``, ``extensive``."""
        return self.module.hparams.target

    @cached_property
    def elements(self) -> set[str]:
        """Elements seen in training."""
        return set(self.module.hparams.elements)


def load_model(path: str | Path = DEFAULT_MODEL, graph: dict | GraphSettings | None = None) -> CrystalPredictor:
    """Load a crystal artifact.

    Parameters
    ----------
    path : str or Path
        Artifact folder (default: the shipped ``checkpoints/perov5-heat-all``).
    graph : dict or GraphSettings, optional
        Graph settings the caller expects; a mismatch with the artifact's is an error, never a silent change.

    Raises
    ------
    ArtifactError
        Corrupted or incompatible artifact, a non-crystal artifact, or a graph-settings mismatch.

    """
    art = load_artifact(path, task="crystal")
    stored = GraphSettings.from_dict(art.config["module"]["graph"])
    if GraphSettings.from_dict(art.metadata.get("graph", {})) != stored:
        raise ArtifactError(f"{art.path}: graph settings in config.yaml and metadata.json differ; re-export")
    if graph is not None:
        wanted = graph if isinstance(graph, GraphSettings) else GraphSettings.from_dict(graph)
        if wanted != stored:
            raise ArtifactError(f"{art.path}: requested graph settings {wanted.to_dict()} differ from the ones the "
                                f"model was trained with {stored.to_dict()}; drop the override or retrain")
    module = restore_module(art, CrystalRegressor)
    calibrator = calibrator_from_dict(art.calibrator) if art.calibrator else None
    return CrystalPredictor(module, stored, calibrator, art.path)
