"""Task registry: each model family names the module that builds, trains and exports it.

``core`` imports no family: the registry holds module *names* and imports the family on first use, so a
``crystal`` run never imports the perturbation stack (anndata, scanpy) and ``sciml --help`` imports nothing.
Every family's ``schema`` module (torch-free) defines ``SCHEMA`` (its ``data`` and ``model`` keys), ``DATA_HINT``
and optionally ``derive(cfg)``; its ``task`` module defines ``datamodule(cfg, run_dir)`` and
``build(cfg, run_dir)``; ``export`` defines ``export(ckpt, state, output, cfg, calibrate, alpha, score)``.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from types import ModuleType

FAMILIES = ("crystal", "hamiltonian", "perturbation")


def family(cfg: dict, part: str) -> ModuleType:
    """The module ``sciml.<cfg["task"]>.<part>`` (``part`` is ``schema``, ``task`` or ``export``).

    Raises
    ------
    ValueError
        ``cfg["task"]`` is not one of :data:`FAMILIES`.

    """
    task = cfg.get("task")
    if task not in FAMILIES:
        raise ValueError(f"config field 'task' is {task!r}; known tasks: {list(FAMILIES)}")
    return import_module(f"sciml.{task}.{part}")


def family_schema(task: str) -> ModuleType:
    """The torch-free module ``sciml.<task>.schema``: ``SCHEMA``, ``DATA_HINT`` and optionally ``derive``."""
    return family({"task": task}, "schema")


def build_task(cfg: dict, run_dir: Path | None = None):
    """Return ``(datamodule, module)`` for ``cfg["task"]``."""
    return family(cfg, "task").build(cfg, run_dir)


def build_datamodule(cfg: dict, run_dir: Path | None = None):
    """The set-up data module of ``cfg["task"]`` (read, featurised, split)."""
    return family(cfg, "task").datamodule(cfg, run_dir)
