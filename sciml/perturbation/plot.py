"""Plots of a perturbation prediction: PCA of control and generated cells, and effects with their bands."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sciml.core.io.figures import save_png


def plot_cells(path: str | Path, ctrl: np.ndarray, result: dict, real: dict | None = None) -> Path:
    """PCA (fitted on control + generated cells) of control, generated and, if given, real cells per condition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    cells = result["cells"]
    pca = PCA(2).fit(np.concatenate([ctrl, cells.reshape(-1, cells.shape[-1])]))
    fig, ax = plt.subplots(figsize=(6, 5))
    z = pca.transform(ctrl)
    ax.scatter(z[:, 0], z[:, 1], s=4, c="lightgrey", label="control (real)")
    for i, label in enumerate(result["conditions"]):
        z = pca.transform(cells[i])
        points = ax.scatter(z[:, 0], z[:, 1], s=4, label=f"{label} (generated)")
        if real and label in real:
            zr = pca.transform(real[label])
            ax.scatter(zr[:, 0], zr[:, 1], s=8, marker="x", color=points.get_facecolor()[0], label=f"{label} (real)")
    ax.set_xlabel("PC1")
    ax.set_ylabel("PC2")
    ax.legend(markerscale=3, fontsize=7)
    ax.set_title("control vs generated cells (PCA of log1p expression)")
    return save_png(fig, Path(path))


def plot_effects(path: str | Path, result: dict, genes: list[str], top: int = 20) -> Path:
    """Mean effect of the ``top`` genes (largest |Δ̂|) of each condition with the conformal band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result["conditions"])
    fig, axes = plt.subplots(n, 1, figsize=(max(6, top * 0.35), 2.8 * n), squeeze=False, constrained_layout=True)
    for i, ax in enumerate(axes[:, 0]):
        eff = result["effect"][i]
        order = np.argsort(-np.abs(eff))[:top]
        x = np.arange(len(order))
        lo, hi = result["lower"][i][order], result["upper"][i][order]
        if np.isfinite(lo).all() and np.isfinite(hi).all():
            ax.vlines(x, lo, hi, color="tab:blue", alpha=0.4, lw=4, label="conformal band (simultaneous)")
        ax.scatter(x, eff[order], color="tab:red", zorder=3, s=14, label="predicted mean effect")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(x, [genes[j] for j in order], rotation=90, fontsize=7)
        ax.set_title(result["conditions"][i], fontsize=9)
        ax.set_ylabel("Δ log1p")
    axes[0, 0].legend(fontsize=7)
    return save_png(fig, Path(path))
