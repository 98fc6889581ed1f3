"""Plots of a perturbation prediction: PCA of control and generated cells, and effects with their bands."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sciml.core.io.figures import save_png


def _pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend (a one-line error naming the fix if it is missing)."""
    from sciml.core.optional import require

    require("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cells(path: str | Path, ctrl: np.ndarray, result: dict, real: dict | None = None) -> Path:
    """PCA (fitted on control + generated cells) of control, generated and, if given, real cells per condition."""
    plt = _pyplot()
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


def _band_label(result: dict, lo: np.ndarray, hi: np.ndarray) -> str:
    """Legend text of the band, or why there is none (no calibrator, too few calibration conditions)."""
    alpha, n = result.get("alpha"), int(result.get("n_calib", 0))
    if alpha is None or np.isnan(lo).all():
        return "no band: the model has no calibrator"
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return (f"band infinite at α = {alpha:g}: {n} calibration conditions; finite needs "
                f"α ≥ 1/(n+1) = {1 / (n + 1):.3f}")
    return f"{100 * (1 - alpha):.0f}% conformal band, simultaneous over genes (α = {alpha:g})"


def plot_effects(path: str | Path, result: dict, genes: list[str], top: int = 20) -> Path:
    """Mean effect of the ``top`` genes (largest |Δ̂|) of each condition with the conformal band.

    One panel per condition: the predicted mean effect (generated minus control mean, log1p units) as dots, the
    band as vertical bars, zero as a thin line; the legend names all three and states α, or says why no band
    is drawn (no calibrator, or too few calibration conditions for α: the band is infinite).
    """
    plt = _pyplot()
    from matplotlib.lines import Line2D

    n = len(result["conditions"])
    fig, axes = plt.subplots(n, 1, figsize=(max(6, top * 0.35), 2.8 * n + 0.6), squeeze=False,
                             constrained_layout=True)
    for i, ax in enumerate(axes[:, 0]):
        eff = result["effect"][i]
        order = np.argsort(-np.abs(eff))[:top]
        x = np.arange(len(order))
        lo, hi = np.asarray(result["lower"][i])[order], np.asarray(result["upper"][i])[order]
        drawn = bool(np.isfinite(lo).all() and np.isfinite(hi).all())
        if drawn:
            ax.vlines(x, lo, hi, color="tab:blue", alpha=0.4, lw=4)
        ax.scatter(x, eff[order], color="tab:red", zorder=3, s=14)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(x, [genes[j] for j in order], rotation=90, fontsize=7)
        ax.set_xlabel(f"gene (top {len(order)} by |predicted effect|)", fontsize=8)
        ax.set_ylabel("Δ log1p expression", fontsize=8)
        ax.set_title(f"{result['conditions'][i]}: predicted mean effect, generated − control cells", fontsize=9)
        handles = [Line2D([], [], color="tab:red", marker="o", ls="", markersize=4,
                          label="predicted mean effect"),
                   Line2D([], [], color="tab:blue", alpha=0.4 if drawn else 0.0, lw=4,
                          label=_band_label(result, lo, hi)),
                   Line2D([], [], color="k", lw=0.5, label="zero effect")]
        ax.legend(handles=handles, fontsize=7, loc="best")
    return save_png(fig, Path(path))
