"""``sciml calibrate --model NAME_OR_DIR [options]``: forward to ``sciml <family> calibrate`` of the artifact's family.

Post-hoc operations on an artifact (refit the conformal calibrator, add a domain test, ...) live with each family
(``sciml crystal calibrate``, ``sciml hamiltonian calibrate``, ``sciml perturbation calibrate``: ``--model
--operation --data --alpha --output`` and the family's own options). This verb reads the family from the
artifact's ``metadata.json`` (``task``) and passes every other option on unchanged, so
``sciml calibrate --model my-crystal-model --data labelled.csv --method split`` runs
``sciml crystal calibrate --model my-crystal-model --data labelled.csv --method split``.
"""

from __future__ import annotations

import json

from sciml.cli.crystal import GROUP_NAMES  # noqa: F401  (the crystal group names, for --help and tests)

#: artifact ``task`` -> the family verb whose ``calibrate`` runs its operations
FAMILY_OF_TASK = {"crystal": "crystal", "hamiltonian": "hamiltonian", "hamiltonian-crystal": "hamiltonian",
                  "perturbation": "perturbation"}


def add_parser(sub, name: str) -> None:
    """Register ``calibrate`` (its other options are those of ``sciml <family> calibrate``)."""
    p = sub.add_parser(name, help="post-hoc operations on a model artifact: runs `sciml <family> calibrate` of the "
                       "artifact's family (see `sciml crystal calibrate --help`)",
                       description="Forwards every option to `sciml <family> calibrate`, the family read from the "
                       "artifact's metadata.json: see `sciml crystal calibrate --help` (or hamiltonian, "
                       "perturbation) for --operation, --data, --alpha, --output and the family's options.")
    p.add_argument("--model", required=True, help="shipped model name (`sciml models`) or artifact folder")
    p.set_defaults(run=run, accepts_overrides=True)


def artifact_family(model: str) -> str:
    """The family verb of the artifact ``model`` (name or folder), from its ``metadata.json``; one-line errors."""
    from sciml.core.io.shipped import resolve_model

    folder = resolve_model(model)
    try:
        task = json.loads((folder / "metadata.json").read_text()).get("task")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        raise ValueError(f"{folder / 'metadata.json'}: missing or unreadable; not a sciml model folder") from None
    if task not in FAMILY_OF_TASK:
        raise ValueError(f"{folder / 'metadata.json'}: task {task!r} has no calibrate operations (known: "
                         f"{', '.join(sorted(FAMILY_OF_TASK))})")
    return FAMILY_OF_TASK[task]


def run(args, overrides: list[str]) -> int:
    """Run ``sciml <family> calibrate --model MODEL <the other options>``."""
    from sciml.cli.main import main

    return main([artifact_family(args.model), "calibrate", "--model", str(args.model), *overrides])
