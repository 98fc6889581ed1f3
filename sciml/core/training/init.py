"""Start a fit from trained weights (fine-tuning): the ``init_from`` key of every run config.

``init_from`` names an artifact folder or shipped model name (``checkpoints/<name>``, weights from safetensors),
a Lightning checkpoint (``.ckpt``) or a ``model.pt`` holding ``state_dict`` and ``hyper_parameters``; both
are loaded with ``weights_only=True``. The weights are copied into the freshly built module before the first
step; the optimiser, schedule and epoch counter start anew (a warm restart, Loshchilov & Hutter 2017).

The weights only mean the same thing in the same network: the hyperparameters a family's module names in its
``weight_keys`` (crystal: network and graph settings, atoms are embedded by atomic number; Hamiltonian: network and
orbital layout; perturbation: network and gene vocabulary) must equal the run's, and every tensor must have the
same name and shape. Anything else is a one-line :class:`~sciml.core.io.artifact.ArtifactError`. Target
normalisation, the data and optimiser settings may differ: that is what fine-tuning on new data changes.
A resumed run (``last.ckpt`` present) restores its own weights and ignores ``init_from``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sciml.core.io.artifact import ArtifactError, load_artifact
from sciml.core.io.checkpoint import load_lightning_checkpoint

WEIGHT_KEYS = ("network",)
"""Hyperparameters that fix what each weight means, for a module that names none (``weight_keys``)."""


def read_weights(source: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """``(state_dict, hyperparameters)`` of an artifact folder, shipped model name, ``.ckpt`` or ``model.pt``."""
    path = Path(source)
    if path.is_file():
        state = load_lightning_checkpoint(path)
        return state["state_dict"], dict(state.get("hyper_parameters") or {})
    art = load_artifact(source)
    return art.state_dict, dict(art.config.get("module") or {})


def _mismatch(own: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> str | None:
    """The first difference in names or shapes between two state dicts, as words; ``None`` when they fit."""
    for name in sorted(set(own) ^ set(theirs)):
        return f"{name!r} only {'in this run' if name in own else 'in the source'}"
    for name in sorted(own):
        if tuple(own[name].shape) != tuple(theirs[name].shape):
            return f"{name!r} is {tuple(theirs[name].shape)} there, {tuple(own[name].shape)} here"
    return None


def init_weights(module: torch.nn.Module, source: str | Path) -> None:
    """Copy the weights of ``source`` into ``module`` (whose ``hparams`` describe the run's network).

    The source's hyperparameters named by ``module.weight_keys`` must equal the module's. A module with a
    ``source_weights(state, hparams)`` method maps the source's weights first (crystal: an ensemble gives its first
    member).

    Raises
    ------
    ArtifactError
        ``source`` cannot be read, or its ``weight_keys`` hyperparameters or tensor names and shapes differ from the
        run's.

    """
    state, theirs = read_weights(source)
    adapt = getattr(module, "source_weights", None)  # a family's reading of its own sources (an ensemble's member)
    if adapt is not None:
        state, theirs = adapt(state, theirs)
    own = dict(getattr(module, "hparams", {}) or {})
    for key in getattr(module, "weight_keys", WEIGHT_KEYS):
        if key in own and key in theirs and own[key] != theirs[key]:
            why = first_difference(theirs[key], own[key])
            raise ArtifactError(f"init_from {source}: its {key} differ from this run's ({why}); "
                                f"fine-tuning needs the same {key}: take them from the source's config")
    problem = _mismatch(module.state_dict(), state)
    if problem:
        raise ArtifactError(f"init_from {source}: its weights do not fit this network ({problem}); fine-tuning needs "
                            "the same network settings")
    module.load_state_dict(state, strict=True)


def first_difference(theirs, own, where: tuple[str, str] = ("there", "here")) -> str:
    """The first differing entry of two settings (mappings or lists), for the error message.

    ``where`` names the two sides in the message (default: the source ``there``, this run ``here``).
    """
    a, b = where
    if isinstance(theirs, dict) and isinstance(own, dict):
        for key in sorted(set(theirs) | set(own), key=str):
            if theirs.get(key) != own.get(key):
                return f"{key}: {theirs.get(key)!r} {a}, {own.get(key)!r} {b}"
    if isinstance(theirs, list) and isinstance(own, list):
        extra = sorted(set(map(str, theirs)) ^ set(map(str, own)))
        if extra:
            return f"{len(theirs)} {a}, {len(own)} {b}; not in both: {', '.join(extra[:5])}"
        return "same entries in another order"
    return f"{theirs!r} {a}, {own!r} {b}"
