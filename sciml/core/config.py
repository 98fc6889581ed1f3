"""Run-config schema: every key ``sciml fit`` reads, with its default and meaning, and validation that names fixes.

A run config is YAML with ``task``, ``seed``, ``threads``, ``run_dir`` and the sections ``data``, ``model``,
``calibration``, ``trainer``, ``checkpoint`` and ``slurm``. :func:`check_config` validates one before anything
is written:

- a key the schema does not know (anywhere: also inside ``calibration``, ``slurm``, ``checkpoint``, ``data`` and
  ``model``) is a :class:`ConfigError` naming the dotted key and the closest valid one;
- a value of the wrong type or outside its choices is an error naming the key; a number that YAML read as a
  string (``1e-3``: YAML 1.1 wants ``1.0e-3``) is converted;
- ``trainer`` passes keywords through to ``lightning.Trainer`` (names checked against its signature); those sciml
  sets itself (:data:`REFUSED_TRAINER_KEYS`) are refused with the setting to use instead;
- crystal ``data.extensive`` follows ``data.unit`` and may not contradict it (:func:`check_target_unit`);
- a ``data.path`` that does not exist is ``<path>: no such file``, with how to get it.

Threads, one rule (:func:`resolve_threads`): ``OMP_NUM_THREADS`` set in the environment (SLURM scripts set it
from ``--cpus-per-task``) wins over ``threads`` from the config or ``--threads``; ``threads`` applies when it
is unset; with neither, torch keeps its default.

This module imports neither torch nor any family, so ``sciml fit --help`` lists the schema (:func:`describe`)
at once and a bad config fails before the heavy imports. The defaults written here are the code's defaults;
``tests/integration/test_config_schema.py`` checks them (and the key sets) against the constructors.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "Key", "Section", "REFUSED_TRAINER_KEYS", "SCHEMA", "TRAINER_DEFAULTS", "check_config",
           "check_data_path", "check_target_unit", "check_trainer_keys", "describe", "refuse_trainer_keys",
           "resolve_threads"]


class ConfigError(ValueError):
    """A run config a user wrote is wrong; the message is one line naming the key and the fix."""


@dataclass(frozen=True)
class Key:
    """One setting: default, meaning, and what values it takes.

    ``kind`` is ``bool``, ``int``, ``float``, ``str``, ``list``, ``map`` (free-form mapping) or ``any``; empty:
    the type of ``default`` (``any`` when the default is ``None``). ``None`` is accepted when the default is
    ``None`` or ``nullable`` is set.
    """

    default: Any = None
    help: str = ""
    kind: str = ""
    choices: tuple = ()
    required: bool = False
    nullable: bool = False

    @property
    def type_name(self) -> str:
        if self.kind:
            return self.kind
        return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(self.default), "any")


@dataclass(frozen=True)
class Section:
    """A mapping of settings; ``by`` names the key whose value picks extra keys from ``variants``."""

    keys: Mapping[str, Key | Section]
    help: str = ""
    nullable: bool = False  # ``null`` switches the part off (Hamiltonian ``model.ridge``)
    by: str | None = None
    variants: Mapping[str, Mapping[str, Key]] = field(default_factory=dict)
    open: bool = False  # other keys pass (``trainer``: checked against lightning.Trainer by check_trainer_keys)
    retired: Mapping[str, str] = field(default_factory=dict)  # keys that no longer exist: why


def _split(fractions: list, seed: int, **extra: Key) -> Section:
    return Section({"fractions": Key(fractions, "train, val, calib, test shares (calib: conformal only)"),
                    "seed": Key(seed, "seed of the random split"), **extra}, "seeded split, written to split.json")


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
    "calibration": Section({
        "score": Key("absolute", "conformity score (normalized: divided by the model's sigma)", "str",
                     ("absolute", "normalized", "cqr")),
        "alpha": Key(0.1, "default miscoverage level of the intervals"),
        "method": Key("split", "calibrator", "str", ("split", "mondrian", "multigroup")),
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

PRDNET = {"dim": Key(64, "width"), "n_layers": Key(3, "graph-attention blocks"), "n_rbf": Key(40, "radial basis size"),
          "n_bins": Key(32, "diffraction bins over |G|"),
          "n_gauss": Key(4, "Gaussians per scattering factor"), "diffraction": Key(True, "reciprocal-space branch"),
          "dropout": Key(0.0, "dropout before each head layer"), "ffn": Key(False, "feed-forward sublayers"),
          "edge_update": Key(False, "edge updates between blocks"),
          "site_resolved": Key(False, "per-atom interference shares")}
CGCNN = {"dim": Key(64, "width"), "n_layers": Key(3, "convolutions"), "n_rbf": Key(40, "radial basis size")}

CRYSTAL = {
    "data": Section({
        "path": Key(None, "CSV with a 'cif' column, or a folder with id_prop.csv", "str", required=True),
        "target": Key(None, "target column of the CSV", "str", required=True),
        "unit": Key("", "target unit, e.g. eV/cell, eV/atom, eV (stored in the model card)"),
        "extensive": Key(None, "target grows with the cell (learned per atom, scaled by n_atoms); default from "
                               "unit: .../atom false, .../cell true", "bool"),
        "graph": Section({"cutoff": Key(8.0, "neighbour radius, Å"),
                          "max_neighbors": Key(12, "k nearest neighbours (null: all within cutoff)", nullable=True),
                          "g_max": Key(4.0, "largest reflection |G|, 1/Å")}, "graph settings (frozen in the model)"),
        "split": _split([0.8, 0.1, 0.05, 0.05], 42),
        "batch_size": Key(64, "structures per batch (per process under DDP)"),
        "num_workers": Key(0, "DataLoader workers"),
        "limit": Key(None, "use only the first N rows (smoke tests)", "int"),
    }),
    "model": Section({
        "network": Section({"name": Key(None, "network", "str", ("prdnet", "cgcnn"), required=True)},
                           by="name", variants={"prdnet": PRDNET, "cgcnn": CGCNN},
                           retired={"heads": "PRDNet's graph attention is per channel; heads never changed it"}),
        "optim": Section({"lr": Key(1e-3, "AdamW learning rate"), "weight_decay": Key(1e-5, "AdamW weight decay"),
                          "loss": Key("l1", "loss on the standardised target", "str", ("l1", "mse", "huber")),
                          "scheduler": Key("cosine", "one-cycle cosine schedule or none", "str", ("cosine", "none"))}),
    }),
}

HAMILTONIAN = {
    "data": Section({
        "path": Key(None, "molecules: npz of conformers (H, H0, S) or a folder of such npz files "
                    "(one per molecule); crystals: a folder of DeepH folders", "str",
                    required=True),
        "split": _split([0.7, 0.05, 0.1, 0.15], 0,
                        by=Key("conformer", "split unit: conformer, or molecule (a folder of npz files: every "
                                            "conformer of a molecule in one split)", "str", ("conformer", "molecule"))),
        "batch_size": Key(32, "structures per batch"),
        "num_workers": Key(0, "DataLoader workers"),
        "cutoff": Key(100.0, "edge cutoff, Å (beyond it a block stays H0's)"),
        "n_virtual": Key(3, "virtual orbitals in the orbital-energy target"),
        "limit": Key(None, "use only the first N conformers (tests)", "int"),
    }),
    "model": Section({
        "network": Section({
            "hidden": Key("32x0e+16x1o+16x1e+8x2e+8x2o+4x3o+4x3e+4x4e", "hidden irreps (starting with 0e)"),
            "lmax": Key(4, "spherical harmonics degree"), "n_layers": Key(2, "interaction layers"),
            "n_rbf": Key(16, "radial basis size"), "cutoff": Key(6.0, "radial cutoff, Å"),
            "radial_hidden": Key(64, "radial MLP width"), "use_h0": Key(True, "predict ΔH = H − H0 from H0"),
            "dtype": Key("float32", "network dtype", "str", ("float32", "float64"))}),
        "ridge": Section({
            "lmax": Key(2, "degree of the edge harmonics"), "lam": Key(1e-6, "ridge penalty"),
            "centres": Key([0.9, 1.5, 2.5, 3.5], "radial Gaussian centres, Å"), "width": Key(0.6, "their width, Å"),
            "two_hop": Key(False, "edges also see both atoms' neighbour sums"),
            "scale_floor": Key(0.0, "feature columns are scaled by max(RMS, floor x largest RMS) of their type: "
                                    "nearly dead columns are not blown up (unseen short bonds); 0: plain RMS")},
            "closed-form base model (needs use_h0); null: none", nullable=True),
        "input_clip": Key(None, "bound of the network's normalised H0 inputs, in training standard deviations per "
                                "irrep instance (inputs far outside the training range are not extrapolated); null: "
                                "off",
                          "float", nullable=True),
        "readout_cutoff": Key(None, "[r_on, r_off] Å: the network's pair corrections fade out (cosine) between them "
                                    "and far pairs keep the ridge's ΔH; null: no envelope", "list", nullable=True),
        "overlap_filter": Key(None, "molecules: keep the predicted ΔH only on overlap eigenvectors with eigenvalue "
                                    "above this (near-null directions of S amplify errors); null: off", "float",
                              nullable=True),
        "loss": Section({"real": Key(1.0, "normalised block MSE weight"), "eig": Key(0.0, "orbital-energy MSE weight"),
                         "eig_scale": Key(1e-3, "orbital-energy scale, Hartree"),
                         "real_scale_power": Key(0.0, "weight of each block irrep in the real-space MSE: its training "
                                                      "scale to this power (0: all alike; 2: MSE in Hartree)"),
                         "density": Key(0.0, "molecules: weight of the squared first-order density error "
                                             "(occupied-virtual block of the H error over the gap); 0: off")}),
        "optim": Section({"lr": Key(2e-3, "AdamW learning rate"), "weight_decay": Key(0.0, "AdamW weight decay"),
                          "scheduler": Key("cosine", "schedule", "str", ("cosine", "onecycle", "none")),
                          "min_lr_ratio": Key(0.01, "cosine floor as a share of lr")}),
    }),
}

PERTURBATION = {
    "data": Section({
        "path": Key(None, ".h5ad file, cells x genes", "str", required=True),
        "condition_key": Key("condition", "obs column of condition labels"),
        "control_label": Key("ctrl", "label of control cells"),
        "counts_layer": Key(None, "layer of raw counts (null: X is log1p)", "str"),
        "target_sum": Key(1e4, "counts per cell after normalisation"),
        "n_hvg": Key(None, "highly variable genes kept (null: all)", "int"),
        "cells_per_condition": Key(64, "cells N per condition in a batch"),
        "conditions_per_batch": Key(4, "conditions C per batch"),
        "split": _split([0.2, 0.4, 0.4], 0, kind=Key("combo_seen2", "split kind", "str", (
            "unseen_single", "combo_seen0", "combo_seen1", "combo_seen2", "additive", "by_cell_type")),
            holdout=Key(0.5, "share of conditions held out"),
            holdout_cell_type=Key(None, "cell type held out (by_cell_type)", "str")),
        "pairing": Key("random", "control pairing", "str", ("random", "ot")),
        "gene_graph": Key(None, "two-column edge list (null: co-expression kNN)", "str"),
        "knn": Key(30, "neighbours of the co-expression graph"),
        "cell_type_key": Key(None, "obs column of cell types", "str"),
        "subset": Key(None, "{obs column: value(s)} filter of cells", "map"),
        "genes": Key(None, "frozen gene vocabulary", "list"),
        "steps_per_epoch": Key(100, "training batches per epoch"),
        "eval_seed": Key(0, "seed of the cells drawn by val/calib/test loaders"),
        "num_workers": Key(0, "DataLoader workers"),
    }),
    "model": Section({
        "network": Section({"dim": Key(64, "width"), "depth": Key(2, "blocks"), "heads": Key(4, "attention heads"),
                            "hops": Key(2, "gene-graph hops"), "graph_mask": Key(True, "mask attention by the graph")}),
        "flow": Section({
            "path": Key("control", "probability path", "str", ("control", "noise")),
            "sigma": Key(0.1, "path noise"), "ot": Key(True, "minibatch-OT pairing"),
            "mmd_weight": Key(2.0, "MMD loss weight λ (kernel: mean over mmd_scales)"),
            "mmd_scales": Key([0.5, 1.0, 2.0, 4.0], "MMD bandwidths, times the median squared distance"),
            "steps": Key(20, "sampling steps"), "method": Key("rk4", "ODE solver", "str", ("euler", "rk4")),
            "val_steps": Key(4, "Euler steps of the validation metric"),
            "max_genes": Key(None, "random gene subset per step (null: all)", "int"),
            "prior_dropout": Key(0.2, "chance to hide a known single effect"),
            "additive_skip": Key(True, "add the additive effect to the velocity"),
            "prior": Key("additive", "prior mean of a double", "str", ("additive", "combination", "masking")),
            "combination_hidden": Key(32, "width of the combination rule"),
            "remainder_mean": Key(1.0, "shrinkage w of the network's mean velocity"),
            "shrink": Key(1.0, "weight of the combination rule over additive (auto: chosen on val)", "any"),
            "kappa": Key(0.0, "masking prior: share of the smaller same-sign single absorbed (auto: chosen)", "any"),
            "denoise": Key(0.0, "masking prior: James-Stein τ on singles (auto: chosen), eb / eb_single / "
                                "eb_joint: empirical Bayes", "any"),
            "blend": Key(1.0, "masking prior: its weight against the combination rule (1: masking alone)"),
            "own_genes": Key("rule", "perturbed genes' own columns of a double", "str", ("rule", "additive")),
            "closure": Key(False, "masking prior rescaled to the controls' total per cell (auto: when closed)", "any"),
            "nonnegative": Key(True, "project generated cells onto x >= 0"),
            "exact_mean": Key(False, "generated mean = prior mean where every single is known"),
            "additive_fallback": Key(False, "generated mean = additive prior (set at export when not better on val)")}),
        "optim": Section({"lr": Key(1e-3, "AdamW learning rate"), "weight_decay": Key(1e-4, "AdamW weight decay"),
                          "scheduler": Key("cosine", "schedule", "str", ("cosine", "none"))}),
        "effect_prior": Key(True, "condition on measured single effects"),
    }),
}

SCHEMA: dict[str, dict[str, Key | Section]] = {"crystal": CRYSTAL, "hamiltonian": HAMILTONIAN,
                                              "perturbation": PERTURBATION}
"""Family-specific sections by task; :data:`COMMON` holds the rest."""

DATA_HINTS = {
    "crystal": "dataset cards in datasets/ say where each set comes from; or point --data.path at your CSV",
    "hamiltonian": "make it with `sciml data hamiltonian` (--molecule water --n 200, or --crystal Si) --out DIR",
    "perturbation": "simulate one with `sciml data grn --config configs/data/grn_default.yaml --output PATH`",
}


def _closest(word: str, options) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else ""


def _value(value: Any, key: Key, where: str) -> Any:
    """``value`` checked against ``key`` (numbers YAML left as strings converted)."""
    if value is None:
        if (key.default is None or key.nullable) and not key.required:
            return None
        raise ConfigError(f"config key {where!r} needs a value ({key.help})")
    kind = key.type_name
    if kind in ("float", "int") and isinstance(value, str):
        try:
            value = float(value) if kind == "float" else int(value)
        except ValueError:
            pass
    ok = {"bool": isinstance(value, bool), "int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, int | float) and not isinstance(value, bool), "str": isinstance(value, str),
          "list": isinstance(value, list | tuple), "map": isinstance(value, Mapping)}.get(kind, True)
    if not ok:
        raise ConfigError(f"config key {where!r} is {value!r}; expected a value of type {kind} ({key.help})")
    if key.choices and value not in key.choices:
        raise ConfigError(f"config key {where!r} is {value!r}; choose one of {list(key.choices)}"
                          f"{_closest(str(value), key.choices)}")
    return value


def _section(node: Any, section: Section, where: str) -> Any:
    """``node`` checked against ``section``: unknown keys, types, choices, required keys (a checked copy)."""
    if node is None:
        return None if section.nullable else {}
    if not isinstance(node, Mapping):
        raise ConfigError(f"config section {where!r} must be a mapping of settings, got {node!r}")
    keys = dict(section.keys)
    if section.by is not None:
        choice = node.get(section.by, section.keys[section.by].default)
        keys |= section.variants.get(choice, {})
    out = {}
    for name, value in node.items():
        dotted = f"{where}.{name}" if where else str(name)
        spec = keys.get(name)
        if spec is None and section.open:
            out[name] = value
            continue
        if spec is None and name in section.retired:
            raise ConfigError(f"config key {dotted!r} is retired ({section.retired[name]}): remove it")
        if spec is None:
            owner = [v for v, extra in section.variants.items() if name in extra]
            if owner:
                raise ConfigError(f"config key {dotted!r} is not a setting of {section.by} {choice!r} (it belongs to "
                                  f"{', '.join(map(repr, owner))}); settings: {', '.join(sorted(keys))}")
            valid = [f"{where}.{k}" if where else k for k in keys]
            hint = _closest(dotted, valid) or f"; valid keys{f' in {where!r}' if where else ''}: {', '.join(keys)}"
            raise ConfigError(f"unknown config key {dotted!r}{hint}")
        out[name] = _section(value, spec, dotted) if isinstance(spec, Section) else _value(value, spec, dotted)
    for name, spec in keys.items():
        if getattr(spec, "required", False) and name not in node:
            raise ConfigError(f"config key {(f'{where}.{name}' if where else name)!r} is missing ({spec.help})")
    return out


def check_target_unit(data: dict) -> dict:
    """Crystal ``data`` with ``extensive`` set from ``unit`` when absent; a contradiction is a :class:`ConfigError`.

    ``.../atom`` units are intensive (``extensive: false``), ``.../cell`` units extensive (``true``); for any
    other unit (``eV`` may be a total energy or a band gap) ``extensive`` must be stated.
    """
    unit, extensive = str(data.get("unit") or ""), data.get("extensive")
    per = unit.replace(" ", "").rsplit("/", 1)[-1].lower() if "/" in unit else ""
    implied = {"atom": False, "cell": True}.get(per)
    if implied is None:
        if extensive is None:
            raise ConfigError(f"data.unit {unit!r} does not say per atom or per cell: set data.extensive (true: the "
                              "target grows with the cell, e.g. a total energy; false: it does not, e.g. a band gap)")
        return data
    if extensive is not None and bool(extensive) != implied:
        fix = "eV/cell" if extensive else "eV/atom"
        raise ConfigError(f"data.unit {unit!r} is per {per} but data.extensive is {extensive}: remove data.extensive "
                          f"(it follows the unit) or give the unit per {'cell' if extensive else 'atom'} (e.g. {fix})")
    return data | {"extensive": implied}


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
        how = (_data_comment(Path(source)) if source else "") or DATA_HINTS[cfg["task"]]
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
                              f"{_closest(f'trainer.{name}', [f'trainer.{v}' for v in options])}")


def _check_signal(name: str) -> None:
    import signal

    names = [s.name for s in signal.Signals]
    if name not in names:
        raise ConfigError(f"config key 'slurm.requeue_signal' is {name!r}, not a signal name{_closest(name, names)}")


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
        unknown ``trainer`` key, contradicting ``data.unit`` and ``data.extensive``.
    FileNotFoundError
        ``data.path`` does not exist.

    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{source or 'config'}: a config must be a mapping of settings")
    task = cfg.get("task")
    if task not in SCHEMA:
        raise ConfigError(f"config field 'task' is {task!r}; known tasks: {list(SCHEMA)}{_closest(str(task), SCHEMA)}")
    root = Section(COMMON | SCHEMA[task])
    out = _section(copy.deepcopy(dict(cfg)), root, "")
    for name in ("data", "model"):
        if name not in out:
            raise ConfigError(f"config section {name!r} is missing (task {task})")
    if task == "crystal":
        out["data"] = check_target_unit(out["data"])
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


def _lines(keys: Mapping[str, Key | Section], prefix: str) -> list[str]:
    """One line per key (``name = default  help [choices]``), a section's own keys before its subsections."""
    out = []
    for name, spec in keys.items():
        if isinstance(spec, Key):
            value = "(required)" if spec.required else f"= {_yaml(spec.default)}"
            choices = f" [{' | '.join(spec.choices)}]" if spec.choices else ""
            out.append(f"  {f'{prefix}{name} {value}':<46} {spec.help}{choices}")
    for name, spec in keys.items():
        if isinstance(spec, Section):
            if spec.help or spec.nullable:
                out.append(f"  {prefix}{name}: {spec.help}{' (default null)' if spec.nullable else ''}")
            out += _lines(spec.keys, f"{prefix}{name}.")
            for variant, extra in spec.variants.items():
                out.append(f"  {prefix}{name} with {spec.by}: {variant}:")
                out += _lines(extra, f"{prefix}{name}.")
    return out


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


def describe() -> str:
    """The schema as text for ``sciml fit --help``: every key with its default, by section and task."""
    head = ["config keys (YAML; override any on the command line with --section.key value, e.g.",
            "--trainer.max_epochs 5 or --model.optim.lr 1.0e-3; values are read as YAML).",
            "Threads: OMP_NUM_THREADS, when set, wins over threads (config or --threads).", "",
            "every task:"]
    body = head + _lines(COMMON, "")
    for task, sections in SCHEMA.items():
        body += ["", f"task: {task}"] + _lines(sections, "")
    return "\n".join(body)
