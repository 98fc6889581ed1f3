"""Single-cell perturbation data: AnnData I/O, condition labels, splits, data module, GRN simulator, baselines, metrics.

Public names are importable from here; they load lazily, so ``import sciml.cells`` imports neither anndata,
scanpy, pot nor lightning.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "PerturbationDataModule": "datamodule",
    "DataError": "anndata_io",
    "read_h5ad": "anndata_io",
    "write_h5ad": "anndata_io",
    "UnknownGeneError": "conditions",
    "parse_condition": "conditions",
    "canonical_label": "conditions",
    "format_condition": "conditions",
    "make_split": "splits",
    "read_control_cells": "table",
    "load_table": "table",
    "SimConfig": "simulate",
    "simulate": "simulate",
    "read_ground_truth": "simulate",
    "BASELINES": "baselines",
    "fit_baselines": "baselines",
    "evaluate": "metrics",
    "noise_ceiling": "metrics",
    "summarise": "metrics",
    "evaluate_baselines": "compare",
    "energy_distance": "distances",
    "mmd_rbf": "distances",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"sciml.cells.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'sciml.cells' has no attribute {name!r}")
