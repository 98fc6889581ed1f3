"""Single-cell perturbation data: AnnData I/O, condition labels, splits, data module, GRN simulator, baselines, metrics.

Heavy dependencies (anndata, scanpy, pot, lightning) are imported by the submodules, not here.
"""
