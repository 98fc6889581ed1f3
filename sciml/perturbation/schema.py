"""Run-config keys of the perturbation family (``sciml fit`` with ``task: perturbation``), with defaults and meanings.

Torch-free: ``sciml fit --help`` and config errors read it before any heavy import. The prior keys of
``model.flow`` are the fields of :class:`~sciml.perturbation.settings.PriorSettings` (default, meaning, allowed
values stated there once); :func:`derive` checks their combinations when the config is read, before any data.
"""

from __future__ import annotations

import dataclasses

from sciml.core.schema import ConfigError, Key, Section, split_section
from sciml.perturbation.settings import PriorSettings

DATA_HINT = "simulate one with `sciml data grn --config configs/data/grn_default.yaml --output PATH`"
"""How to get data when ``data.path`` does not exist."""


def prior_keys() -> dict[str, Key]:
    """The ``model.flow`` keys of :class:`PriorSettings`: its defaults, meanings, kinds and choices."""
    return {f.name: Key(f.default, f.metadata["help"], f.metadata["kind"], f.metadata["choices"])
            for f in dataclasses.fields(PriorSettings)}


SCHEMA = {
    "data": Section({
        "path": Key(None, ".h5ad file, cells x genes", "str", required=True),
        "condition_key": Key("condition", "obs column of condition labels"),
        "control_label": Key("ctrl", "label of control cells"),
        "counts_layer": Key(None, "layer of raw counts (null: X is log1p)", "str"),
        "target_sum": Key(1e4, "counts per cell after normalisation"),
        "n_hvg": Key(None, "highly variable genes kept (null: all)", "int"),
        "cells_per_condition": Key(64, "cells N per condition in a batch"),
        "conditions_per_batch": Key(4, "conditions C per batch"),
        "split": split_section([0.2, 0.4, 0.4], 0, kind=Key("combo_seen2", "split kind", "str", (
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
        "max_control_cells": Key(None, "control cells used per cell type, a draw seeded by the split seed (null: "
                                 "all)", "int"),
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
            "max_genes": Key("auto", "genes per training step and per attention chunk (auto: all up to 256, "
                             "256 on wider panels; null: all)", "int|auto", nullable=True),
            "predict_genes": Key("auto", "genes of each condition the network generates at prediction, those with "
                                 "the largest prior mean effect; the others move by the prior mean (auto: all up to "
                                 "128, 128 on wider panels; null: all)", "int|auto", nullable=True),
            "combination_hidden": Key(32, "width of the combination rule"),
            "nonnegative": Key(True, "project generated cells onto x >= 0"),
            **prior_keys()}),
        "optim": Section({"lr": Key(1e-3, "AdamW learning rate"), "weight_decay": Key(1e-4, "AdamW weight decay"),
                          "scheduler": Key("cosine", "schedule", "str", ("cosine", "none"))}),
        "effect_prior": Key(True, "condition on measured single effects"),
    }),
}


def derive(cfg: dict) -> dict:
    """The checked config, its prior settings checked together (:class:`PriorSettings`: ranges, combinations)."""
    try:
        PriorSettings.from_flow((cfg.get("model") or {}).get("flow"))
    except ConfigError as err:
        raise ConfigError(f"config: model.{err}") from None
    return cfg
