"""Task registry: how each model family builds its data module and Lightning module from a config."""

from __future__ import annotations

from pathlib import Path

from sciml.tasks.crystal import build_crystal, crystal_datamodule
from sciml.tasks.hamiltonian import build_hamiltonian, hamiltonian_datamodule
from sciml.tasks.perturbation import build_perturbation, perturbation_datamodule

TASKS = {"crystal": build_crystal, "perturbation": build_perturbation, "hamiltonian": build_hamiltonian}
DATAMODULES = {"crystal": crystal_datamodule, "perturbation": perturbation_datamodule,
               "hamiltonian": hamiltonian_datamodule}


def build_task(cfg: dict, run_dir: Path | None = None):
    """Return ``(datamodule, module)`` for ``cfg["task"]``."""
    task = cfg.get("task")
    if task not in TASKS:
        raise ValueError(f"config field 'task' is {task!r}; known tasks: {sorted(TASKS)}")
    return TASKS[task](cfg, run_dir)
