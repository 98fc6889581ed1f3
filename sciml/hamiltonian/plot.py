"""Plots of predictions: orbital-level diagrams (molecules) and band structures (crystals)."""

from __future__ import annotations

import math
from pathlib import Path


def plot_levels(row: dict, path: str | Path, core_ev: float = -100.0) -> Path:
    """Draw the levels of one ``eigenvalues.json`` row (eV) to ``path`` (PNG, written atomically).

    Predicted levels are horizontal bars with their interval as a shaded band; reference levels, when the
    row has ``reference_orbital_energies_ev``, are drawn in a second column. Occupied levels are solid,
    virtual ones dashed. Levels below ``core_ev`` (core orbitals) are left out of the view and counted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sciml.core.io.figures import save_png

    eps, lo, hi = row["orbital_energies_ev"], row["lower_ev"], row["upper_ev"]
    ref = row.get("reference_orbital_energies_ev")
    occ = row["n_occupied"]
    fig, ax = plt.subplots(figsize=(3.2 if ref is None else 4.4, 5.0))
    for k, e in enumerate(eps):
        style = "-" if k < occ else "--"
        ax.hlines(e, 0.1, 0.9, colors="C0", linestyles=style)
        if lo[k] == lo[k] and abs(hi[k] - lo[k]) < 1e3:  # skip NaN / infinite intervals
            ax.fill_between([0.1, 0.9], lo[k], hi[k], color="C0", alpha=0.2, lw=0)
    if ref is not None:
        for k, e in enumerate(ref):
            ax.hlines(e, 1.1, 1.9, colors="C3", linestyles="-" if k < occ else "--")
    ax.set_xticks([0.5] + ([1.5] if ref is not None else []), ["predicted"] + (["DFT"] if ref is not None else []))
    ax.set_xlim(0, 2 if ref is not None else 1)
    valence = [e for e in eps if e > core_ev]
    if len(valence) < len(eps):  # deep core levels would squash the valence region: clip and say so
        span = max(valence) - min(valence) if len(valence) > 1 else 1.0
        ax.set_ylim(min(valence) - 0.1 * span, max(valence) + 0.1 * span)
        ax.text(0.02, 0.01, f"{len(eps) - len(valence)} core level(s) below {core_ev:.0f} eV not shown",
                transform=ax.transAxes, fontsize=7)
    ax.set_ylabel("orbital energy (eV)")
    alpha = row.get("alpha")
    ax.set_title(f"{Path(str(row['source'])).name}" + (f"\n{100 * (1 - alpha):.0f}% intervals" if alpha else ""),
                 fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


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
