"""Run-config keys of the perturbation family (``sciml fit`` with ``task: perturbation``), with defaults and meanings.

Torch-free: ``sciml fit --help`` and config errors read it before any heavy import. The defaults are the code's
(``tests/integration/test_config_schema.py`` checks them against the constructors they document).
"""

from __future__ import annotations

from sciml.core.schema import Key, Section, split_section

DATA_HINT = "simulate one with `sciml data grn --config configs/data/grn_default.yaml --output PATH`"
"""How to get data when ``data.path`` does not exist."""

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
