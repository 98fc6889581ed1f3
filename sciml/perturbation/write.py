"""Write generated cells and per-condition effects with bands to an AnnData file (atomically)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BAND = "simultaneous over genes: split-conformal sup-norm box over held-out calibration conditions"


def to_anndata(result: dict, genes: list[str], info: dict):
    """AnnData of the generated cells: ``obs['condition']``, gene names on ``var``, effects in ``uns``.

    ``uns['perturbation_effects']`` holds ``conditions`` ``(C,)``, ``effect``/``lower``/``upper`` ``(C, G)``
    (columns in ``var_names`` order; NaN bands when the model has no calibrator), ``alpha``, ``threshold``,
    ``notes``, ``band``, ``n_calib`` (calibration conditions), ``domain_pvalue`` ``(C,)`` (NaN without
    ``domain.json``), ``in_domain`` ``(C,)`` bool (a flagged condition's band carries no guarantee; its note says
    so) and ``domain_beta``; ``uns['perturbation_predict']`` holds ``info``
    (model, control file, pairing...).
    """
    import pandas as pd

    from sciml.core.optional import require

    ad = require("anndata")  # a core dependency: missing only in a broken install

    cells = result["cells"]
    c, n, g = cells.shape
    labels = np.repeat(np.asarray(result["conditions"], dtype=object), n)
    obs = pd.DataFrame({"condition": pd.Categorical(labels, categories=list(dict.fromkeys(result["conditions"])))},
                       index=[f"gen{i}" for i in range(c * n)])
    adata = ad.AnnData(X=cells.reshape(c * n, g).astype(np.float32), obs=obs, var=pd.DataFrame(index=list(genes)))
    adata.uns["perturbation_effects"] = {
        "conditions": np.asarray(result["conditions"], dtype=str), "notes": np.asarray(result["notes"], dtype=str),
        "effect": result["effect"].astype(np.float32), "lower": np.asarray(result["lower"], np.float32),
        "upper": np.asarray(result["upper"], np.float32), "threshold": float(result["threshold"]),
        "alpha": float("nan") if result["alpha"] is None else float(result["alpha"]), "band": BAND,
        "n_calib": int(result.get("n_calib", 0)),
        "domain_pvalue": np.asarray(result.get("domain_pvalue", np.full(c, np.nan)), np.float64),
        "in_domain": np.asarray(result.get("in_domain", np.ones(c, bool)), bool),
        "domain_beta": float(result.get("beta", float("nan"))),
        "unit": "log1p expression, generated mean minus control mean"}
    adata.uns["perturbation_predict"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in info.items()}
    return adata


def write_prediction(result: dict, genes: list[str], info: dict, path: str | Path) -> Path:
    """Write :func:`to_anndata` to ``path`` atomically (``.h5ad``)."""
    from sciml.perturbation.data.anndata_io import write_h5ad

    return write_h5ad(to_anndata(result, genes, info), path)
