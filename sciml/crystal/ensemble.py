"""Join trained crystal models into one mean ensemble (``sciml crystal ensemble``).

The members are runs of the same config, each trained from its own random initialisation (other seeds): same graph
settings, same target and normalisation, same elements. Warm restarts of one model stay next to it and average
little out (``benchmarks/crystal_mp_ensemble.py``). :func:`assemble` writes a checkpoint of one
:class:`~sciml.crystal.nn.ensemble.MeanEnsemble` network; ``sciml export --ckpt FILE --config CONFIG --calibrate``
turns it into an artifact like any run's, its conformal calibrator and domain test fitted on the ensemble itself.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sciml.core.io.artifact import ArtifactError
from sciml.core.io.atomic import atomic_open
from sciml.core.training.init import first_difference, read_weights
from sciml.crystal.model import current_network

SHARED = ("graph", "target", "elements")
"""Hyperparameters every member must share: the network's input and the meaning of its output."""


def ensemble_state(members: list[str | Path]) -> dict:
    """``{"state_dict", "hyper_parameters", "members"}`` of the mean ensemble of ``members``.

    ``members``: artifact folders, shipped names or ``.ckpt`` files of crystal models.

    Raises
    ------
    ArtifactError
        Fewer than two members, a member that is itself an ensemble or not a crystal network, or members that differ
        in a :data:`SHARED` setting (its first differing entry named).

    """
    if len(members) < 2:
        raise ArtifactError(f"an ensemble needs at least 2 members, got {len(members)}")
    state, hparams, networks = {}, None, []
    for k, source in enumerate(members):
        weights, theirs = read_weights(source)
        network = current_network(theirs.get("network") or {})
        if network.get("name") in (None, "ensemble"):
            raise ArtifactError(f"{source}: not a single crystal network (network {network.get('name')!r}); give "
                                "the members' own models")
        if hparams is None:
            hparams = theirs
        for key in SHARED:
            if theirs.get(key) != hparams.get(key):
                why = first_difference(theirs.get(key), hparams.get(key), ("here", "there"))
                raise ArtifactError(f"{source}: its {key} differ from those of {members[0]} ({why}); ensemble "
                                    "members must be runs of one config")
        networks.append(network)
        state |= {f"net.members.{k}.{name[len('net.'):]}": t for name, t in weights.items() if name.startswith("net.")}
    hparams = dict(hparams) | {"network": {"name": "ensemble", "members": networks}}
    return {"state_dict": state, "hyper_parameters": hparams, "members": [str(m) for m in members]}


def first_member(state: dict[str, torch.Tensor], hparams: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """``(state_dict, hyperparameters)`` of an ensemble's first member; a single network's unchanged.

    Fine-tuning (``init_from``) from an ensemble starts from its first member: the members are runs of one config.
    """
    network = hparams.get("network") or {}
    if network.get("name") != "ensemble":
        return state, hparams
    prefix = "net.members.0."
    return ({"net." + name[len(prefix):]: t for name, t in state.items() if name.startswith(prefix)},
            dict(hparams) | {"network": network["members"][0]})


def assemble(members: list[str | Path], output: str | Path) -> dict:
    """Write the ensemble checkpoint of ``members`` to ``output`` (atomically) and return its state."""
    state = ensemble_state(members)
    with atomic_open(output, "wb") as fh:
        torch.save(state, fh)
    return state
