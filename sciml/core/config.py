"""Run configs of ``sciml fit``: the keys every task shares, and :func:`check_config`, which validates a whole config.

A run config is YAML with ``task``, ``seed``, ``threads``, ``run_dir`` and the sections ``data``, ``model``,
``calibration``, ``trainer``, ``checkpoint`` and ``slurm``. The shared keys are here (:data:`COMMON`); each
family's ``data`` and ``model`` keys are in ``sciml/<family>/schema.py`` (``SCHEMA``, ``DATA_HINT`` and optionally
``derive``), found by name through :func:`sciml.core.registry.family_schema`; the mechanism is
:mod:`sciml.core.schema`. :func:`check_config` validates a config before anything is read or written:

- a key the schema does not know is a :class:`ConfigError` naming the dotted key and the closest valid one;
- a value of the wrong type or outside its choices is an error naming the key and the allowed values;
- ``trainer`` passes keywords through to ``lightning.Trainer`` (names checked against its signature); those sciml
  sets itself (:data:`REFUSED_TRAINER_KEYS`) are refused with the setting to use instead;
- a family's ``derive`` fills derived values (crystal ``data.extensive`` from ``data.unit``);
- a ``data.path`` that does not exist is ``<path>: no such file``, with how to get it.

Threads, one rule (:func:`resolve_threads`): ``OMP_NUM_THREADS`` set in the environment (SLURM scripts set it
from ``--cpus-per-task``) wins over ``threads`` from the config or ``--threads``; ``threads`` applies when it
is unset; with neither, torch keeps its default. Imports neither torch nor any family at module level.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sciml.core.registry import FAMILIES, family_schema
from sciml.core.schema import ConfigError, Key, Section, check_section, closest, describe_keys

__all__ = ["COMMON", "ConfigError", "REFUSED_TRAINER_KEYS", "TRAINER_DEFAULTS", "check_config", "check_data_path",
           "check_trainer_keys", "describe", "refuse_trainer_keys", "resolve_threads", "schemas"]

REFUSED_TRAINER_KEYS = {
    "default_root_dir": "sciml writes everything into run_dir: set run_dir (--run_dir DIR)",
    "callbacks": "sciml sets its callbacks (checkpoints, calibration, requeue): use the checkpoint, calibration "
                 "and slurm sections",
    "logger": "sciml writes CSV and TensorBoard logs under run_dir",
    "plugins": "sciml sets its plugins (atomic checkpoint writes, SLURM, CPU batch-norm sync)",
    "enable_checkpointing": "sciml always writes best.ckpt and last.ckpt (checkpoint.every_n_train_steps sets "
                            "how often)",
    "barebones": "barebones turns off the checkpoints and logs a run needs",
}
"""``trainer`` keys refused, with the reason: sciml passes these to ``lightning.Trainer`` itself."""

TRAINER = Section({
    "max_epochs": Key(100, "epochs"),
    "accelerator": Key("auto", "cpu, gpu or auto"),
    "devices": Key(1, "devices per node (DDP: one process each)", "any"),
    "log_every_n_steps": Key(10, "logging interval, optimiser steps"),
    "deterministic": Key(False, "deterministic algorithms (exact reruns and resumes)"),
}, "any other lightning.Trainer argument passes through (strategy, num_nodes, precision, gradient_clip_val, "
   "enable_progress_bar, ...), except " + ", ".join(REFUSED_TRAINER_KEYS), open=True)

TRAINER_DEFAULTS = {name: key.default for name, key in TRAINER.keys.items()}
"""``lightning.Trainer`` keywords sciml sets unless the config's ``trainer`` section does."""

COMMON = {
    "task": Key(None, "model family", "str", ("crystal", "hamiltonian", "perturbation"), required=True),
    "seed": Key(0, "global seed (lightning.seed_everything)"),
    "threads": Key(None, "torch threads; OMP_NUM_THREADS in the environment, when set, wins", "int"),
    "run_dir": Key("runs/default", "run folder: config.yaml, split.json, checkpoints/, logs/, calibrator.json; "
                                   "fit resumes from its checkpoints (--fresh starts over)"),
    "init_from": Key(None, "start from these weights (fine-tuning): a model folder or shipped name, a .ckpt or a "
                           "model.pt with the same network; a resumed run ignores it", "str"),
    "calibration": Section({
        "score": Key("absolute", "conformity score (normalized: divided by the model's sigma)", "str",
                     ("absolute", "normalized", "cqr")),
        "alpha": Key(0.1, "default miscoverage level of the intervals"),
        "method": Key("split", "calibrator", "str", ("split", "mondrian", "multigroup", "conditional")),
        "group_by": Key(None, "group function(s) for mondrian/multigroup, e.g. crystal_system", "any"),
        "callback": Key(True, "calibrate after fit (false: at export, e.g. perturbation effects)"),
        "domain": Key(None, "Hamiltonian molecule models: domain-test settings at export (k, beta, holdout, "
                            "sigma_power; sciml.hamiltonian.domain.fit_domain)", "map", nullable=True),
    }, "conformal calibration on the calib split"),
    "trainer": TRAINER,
    "checkpoint": Section({
        "every_n_train_steps": Key(None, "write last.ckpt every N optimiser steps instead of every epoch", "int"),
    }, "checkpoints/best.ckpt (lowest val_mae) and checkpoints/last.ckpt (resume)"),
    "slurm": Section({
        "auto_requeue": Key(True, "on SLURM: save hpc_ckpt_<n>.ckpt and requeue on the pre-timeout signal"),
        "requeue_signal": Key("SIGUSR1", "signal of sbatch --signal=SIG@seconds"),
    }, "used only when running under SLURM"),
}


def schemas() -> dict[str, Mapping[str, Key | Section]]:
    """Each family's ``data`` and ``model`` keys, by task (read from ``sciml/<family>/schema.py``)."""
    return {task: family_schema(task).SCHEMA for task in FAMILIES}


def _data_comment(source: Path) -> str:
    """The trailing comment of the ``data.path`` line of the YAML file ``source`` (``""`` if none)."""
    import yaml

    try:
        text = source.read_text(encoding="utf-8")
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""
    for section in (v for k, v in getattr(root, "value", []) if k.value == "data"):
        for key, value in getattr(section, "value", []):
            if key.value == "path" and isinstance(value, yaml.ScalarNode):
                line = text.splitlines()[value.end_mark.line]
                found = re.match(r"\s+#\s*(.+)", line[value.end_mark.column:])
                return found.group(1).strip() if found else ""
    return ""


def check_data_path(cfg: dict, source: str | Path | None = None) -> None:
    """``<path>: no such file`` with how to get it (the config's ``data.path`` comment, else a family hint)."""
    path = cfg["data"]["path"]
    if not Path(path).exists():
        how = (_data_comment(Path(source)) if source else "") or family_schema(cfg["task"]).DATA_HINT
        raise FileNotFoundError(f"{path}: no such file (data.path{f' in {source}' if source else ''}); {how}")


def refuse_trainer_keys(trainer: Mapping) -> None:
    """A :class:`ConfigError` for a ``trainer`` key sciml passes to ``lightning.Trainer`` itself, with the reason."""
    for name in trainer:
        if name in REFUSED_TRAINER_KEYS:
            raise ConfigError(f"config key 'trainer.{name}' is set by sciml: {REFUSED_TRAINER_KEYS[name]}")


def check_trainer_keys(trainer: Mapping) -> None:
    """Refuse keys sciml sets itself, and names ``lightning.Trainer`` does not take (with the closest one)."""
    refuse_trainer_keys(trainer)
    import inspect

    from lightning import Trainer

    valid = [p for p in inspect.signature(Trainer.__init__).parameters if p != "self"]
    for name in trainer:
        if name not in valid:
            options = [v for v in valid if v not in REFUSED_TRAINER_KEYS]
            raise ConfigError(f"unknown config key 'trainer.{name}' (not a lightning.Trainer argument)"
                              f"{closest(f'trainer.{name}', [f'trainer.{v}' for v in options])}")


def _check_signal(name: str) -> None:
    import signal

    names = [s.name for s in signal.Signals]
    if name not in names:
        raise ConfigError(f"config key 'slurm.requeue_signal' is {name!r}, not a signal name{closest(name, names)}")


def check_config(cfg: Any, source: str | Path | None = None, data_path: bool = True) -> dict:
    """Validate a run config; return a checked copy with derived values filled in (crystal ``data.extensive``).

    Parameters
    ----------
    cfg : dict
        The run config, overrides applied.
    source : str or Path, optional
        The YAML file it came from (named in errors; its ``data.path`` comment says how to get missing data).
    data_path : bool
        Check that ``data.path`` exists.

    Raises
    ------
    ConfigError
        Unknown key (with the closest valid one), wrong type or choice, missing required key, refused or
        unknown ``trainer`` key, a family's derived-value check (crystal ``data.unit`` and ``data.extensive``).
    FileNotFoundError
        ``data.path`` does not exist.

    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{source or 'config'}: a config must be a mapping of settings")
    task = cfg.get("task")
    if task not in FAMILIES:
        raise ConfigError(f"config field 'task' is {task!r}; known tasks: {list(FAMILIES)}"
                          f"{closest(str(task), FAMILIES)}")
    family = family_schema(task)
    out = check_section(copy.deepcopy(dict(cfg)), Section(COMMON | family.SCHEMA), "")
    for name in ("data", "model"):
        if name not in out:
            raise ConfigError(f"config section {name!r} is missing (task {task})")
    out = getattr(family, "derive", lambda checked: checked)(out)
    _check_signal((out.get("slurm") or {}).get("requeue_signal", "SIGUSR1"))
    trainer = out.get("trainer") or {}
    refuse_trainer_keys(trainer)  # before the data check; the name check below imports lightning
    if data_path:
        check_data_path(out, source)
    check_trainer_keys(trainer)
    return out


def resolve_threads(threads: int | None, environ: Mapping[str, str]) -> tuple[int | None, str]:
    """Torch threads for a run and where the number came from (the one place the rule lives).

    ``OMP_NUM_THREADS`` set in the environment wins (on a cluster the job script sets it from the CPUs the
    scheduler gave the task); otherwise ``threads`` from the config (or ``--threads``); otherwise ``None``
    (torch's default).

    Returns
    -------
    tuple
        ``(threads or None, "OMP_NUM_THREADS" | "config" | "default")``.

    """
    env = str(environ.get("OMP_NUM_THREADS", "")).strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ConfigError(f"OMP_NUM_THREADS={env!r} is not a whole number") from None
        if n < 1:
            raise ConfigError(f"OMP_NUM_THREADS={env!r} must be >= 1")
        return n, "OMP_NUM_THREADS"
    if threads:
        return int(threads), "config"
    return None, "default"


def describe() -> str:
    """The schema as text for ``sciml fit --help``: every key with its default, by section and task."""
    head = ["config keys (YAML; override any on the command line with --section.key value, e.g.",
            "--trainer.max_epochs 5 or --model.optim.lr 1.0e-3; values are read as YAML).",
            "Threads: OMP_NUM_THREADS, when set, wins over threads (config or --threads).", "",
            "every task:"]
    body = head + describe_keys(COMMON, "")
    for task, sections in schemas().items():
        body += ["", f"task: {task}"] + describe_keys(sections, "")
    return "\n".join(body)
