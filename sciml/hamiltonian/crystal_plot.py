"""Band-structure plot of one crystal prediction: predicted bands (with conformal bands) vs reference bands."""

from __future__ import annotations

import math
from pathlib import Path


def plot_bands(row: dict, path: str | Path) -> Path:
    """Draw the k-path bands of one ``bands.json`` row (eV) to ``path`` (PNG, written atomically).

    Predicted bands are solid lines (occupied blue, virtual orange) shaded by their per-band conformal radius
    when finite; reference bands (``reference_kpath_bands_ev``, from a reference DeepH folder's H) are dashed
    black. The VBM is the zero of energy; high-symmetry points label the x axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from sciml.core.io.figures import save_png

    kp = row["kpath"]
    x, bands, occ = np.asarray(kp["x"]), np.asarray(kp["bands_ev"]), row["n_occupied"]
    zero = row["vbm_ev"]
    fig, ax = plt.subplots(figsize=(5.0, 4.0))
    radius = row.get("band_radius_ev") or [None] * bands.shape[1]
    for b in range(bands.shape[1]):
        color = "C0" if b < occ else "C1"
        ax.plot(x, bands[:, b] - zero, color=color, lw=1.2, label="predicted" if b == 0 else None)
        r = radius[b]
        if r is not None and math.isfinite(r) and r < 10:
            ax.fill_between(x, bands[:, b] - zero - r, bands[:, b] - zero + r, color=color, alpha=0.15, lw=0)
    if "reference_kpath_bands_ev" in row:
        ref = np.asarray(row["reference_kpath_bands_ev"])
        for b in range(ref.shape[1]):
            ax.plot(x, ref[:, b] - zero, "k--", lw=0.8, label="reference" if b == 0 else None)
    ticks: dict[float, str] = {}
    for t, label in row["kpath"]["ticks"]:  # a jump between path branches shows both labels, "K|U"
        old = ticks.get(round(t, 6))
        ticks[round(t, 6)] = label if old in (None, label) else f"{old}|{label}"
    ax.set_xticks(list(ticks), [label.replace("\\Gamma", "Γ") for label in ticks.values()])
    for t in ticks:
        ax.axvline(t, color="0.8", lw=0.5)
    ax.axhline(0.0, color="0.6", lw=0.5, ls=":")
    ax.set_xlim(x.min(), x.max())
    ax.set_ylabel("E − VBM (eV)")
    gap = f", gap {row['gap_ev']:.2f} eV" if "gap_ev" in row else ""
    ax.set_title(f"{Path(str(row['source'])).name}{gap}", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return save_png(fig, path)
