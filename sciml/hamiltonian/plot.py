"""Plots of predictions a reader can use without the README: orbital levels (molecules), bands (crystals).

Every line style has a legend entry, the conformal level (1 − α) is stated, and an interval is drawn when it
is visible at the plot's resolution; otherwise (or when it is infinite) the plot says so in words.
"""

from __future__ import annotations

import math
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _width_text(width_ev: float) -> str:
    return f"{1000 * width_ev:.2g} meV" if width_ev < 0.1 else f"{width_ev:.2g} eV"


def plot_levels(row: dict, path: str | Path, core_ev: float = -100.0) -> Path:
    """Draw the levels of one ``eigenvalues.json`` row (eV) to ``path`` (PNG, written atomically).

    Predicted levels are bars with their conformal interval as a shaded band (the band's height is the interval;
    when all intervals are below the plot's resolution, ~0.3% of the energy range, the plot states their largest
    width instead); reference (DFT) levels, when the row has ``reference_orbital_energies_ev``, are drawn in a
    second column. Occupied levels are solid, virtual ones dashed. Levels below ``core_ev`` (core orbitals) are
    left out of the view and counted.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from sciml.core.io.figures import save_png

    plt = _pyplot()
    eps, lo, hi = row["orbital_energies_ev"], row["lower_ev"], row["upper_ev"]
    ref = row.get("reference_orbital_energies_ev")
    occ, alpha = row["n_occupied"], row.get("alpha")
    fig, ax = plt.subplots(figsize=(3.6 if ref is None else 4.8, 5.2))
    shown = [k for k, e in enumerate(eps) if e > core_ev] or list(range(len(eps)))
    span = max(eps[k] for k in shown) - min(eps[k] for k in shown) or 1.0
    finite = [hi[k] - lo[k] for k in shown if lo[k] == lo[k] and math.isfinite(hi[k] - lo[k])]
    visible = bool(finite) and max(finite) > 0.003 * span
    for k in shown:
        ax.hlines(eps[k], 0.1, 0.9, colors="C0", linestyles="-" if k < occ else "--", lw=1.5)
        if visible and lo[k] == lo[k] and math.isfinite(hi[k] - lo[k]):
            ax.fill_between([0.1, 0.9], lo[k], hi[k], color="C0", alpha=0.25, lw=0)
    if ref is not None:
        for k in shown:
            ax.hlines(ref[k], 1.1, 1.9, colors="C3", linestyles="-" if k < occ else "--", lw=1.5)
    ax.set_xticks([0.5] + ([1.5] if ref is not None else []), ["predicted"] + (["DFT (reference)"] if ref else []))
    ax.set_xlim(0, 2 if ref is not None else 1)
    ax.set_ylabel("orbital energy (eV)")
    handles = [Line2D([], [], color="k", ls="-", label="occupied"), Line2D([], [], color="k", ls="--", label="virtual")]
    level = f"{100 * (1 - alpha):.0f}%" if alpha else None
    notes = []
    if level and visible:
        handles.append(Patch(color="C0", alpha=0.25, label=f"{level} conformal interval (α = {alpha:g})"))
    elif level and finite:
        notes.append(f"{level} conformal intervals (α = {alpha:g}) ≤ {_width_text(max(finite))} wide:\n"
                     "below the plot's resolution")
    elif level:
        notes.append(f"{level} conformal intervals (α = {alpha:g}): infinite or not calibrated")
    if len(shown) < len(eps):
        notes.append(f"{len(eps) - len(shown)} core level(s) below {core_ev:.0f} eV not shown")
    ax.legend(handles=handles, fontsize=7, loc="upper left")
    bottom = 0.1 + 0.07 * sum(note.count("\n") + 1 for note in notes)  # room for the notes below the levels
    ax.set_ylim(min(eps[k] for k in shown) - bottom * span, max(eps[k] for k in shown) + 0.12 * span * len(handles))
    if notes:
        ax.text(0.02, 0.01, "\n".join(notes), transform=ax.transAxes, fontsize=6.5, va="bottom")
    ax.set_title(Path(str(row["source"])).name, fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


def plot_bands(row: dict, path: str | Path) -> Path:
    """Draw the k-path bands of one ``bands.json`` row (eV) to ``path`` (PNG, written atomically).

    Predicted bands are solid lines (valence blue, conduction orange), shaded by their per-band conformal radius
    when finite and visible (the shading's α is in the legend; otherwise a note says the intervals are infinite
    and the smallest α that would make them finite, or below the resolution); reference bands
    (``reference_kpath_bands_ev``, from a reference DeepH folder's H) are dashed black. The VBM is the zero of
    energy; high-symmetry points label the x axis (wave vector along the path, 1/Å).
    """
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from sciml.core.io.figures import save_png

    plt = _pyplot()
    kp = row["kpath"]
    x, bands, occ = np.asarray(kp["x"]), np.asarray(kp["bands_ev"]), row["n_occupied"]
    zero, alpha = row["vbm_ev"], row.get("alpha", 0.1)
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    radius = row.get("band_radius_ev") or [None] * bands.shape[1]
    span = float(bands.max() - bands.min()) or 1.0
    shaded = []
    for b in range(bands.shape[1]):
        color = "C0" if b < occ else "C1"
        ax.plot(x, bands[:, b] - zero, color=color, lw=1.2)
        r = radius[b]
        if r is not None and math.isfinite(r) and 0.003 * span < r < span:
            ax.fill_between(x, bands[:, b] - zero - r, bands[:, b] - zero + r, color=color, alpha=0.18, lw=0)
            shaded.append(b)
    handles = [Line2D([], [], color="C0", label="predicted valence bands"),
               Line2D([], [], color="C1", label="predicted conduction bands")]
    if shaded:
        handles.append(Patch(color="0.5", alpha=0.3, label=f"{100 * (1 - alpha):.0f}% conformal band (α = {alpha:g})"))
    if "reference_kpath_bands_ev" in row:
        ref = np.asarray(row["reference_kpath_bands_ev"])
        for b in range(ref.shape[1]):
            ax.plot(x, ref[:, b] - zero, "k--", lw=0.8)
        handles.append(Line2D([], [], color="k", ls="--", lw=0.8, label="reference (DFT)"))
    note = _band_note(radius, shaded, alpha, row)
    if note:  # below the legend, outside the axes
        ax.text(1.01, 0.0, note, transform=ax.transAxes, fontsize=6.5, va="bottom", wrap=True)
    ticks: dict[float, str] = {}
    for t, label in row["kpath"]["ticks"]:  # a jump between path branches shows both labels, "K|U"
        old = ticks.get(round(t, 6))
        ticks[round(t, 6)] = label if old in (None, label) else f"{old}|{label}"
    ax.set_xticks(list(ticks), [label.replace("\\Gamma", "Γ") for label in ticks.values()])
    for t in ticks:
        ax.axvline(t, color="0.8", lw=0.5)
    ax.axhline(0.0, color="0.6", lw=0.5, ls=":")
    ax.set_xlim(x.min(), x.max())
    ax.set_xlabel("wave vector along the high-symmetry path (1/Å)")
    ax.set_ylabel("E − VBM (eV)")
    gap = f", gap {row['gap_ev']:.2f} eV" if "gap_ev" in row else ""
    ax.set_title(f"{Path(str(row['source'])).name}{gap}", fontsize=9)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return save_png(fig, path)


def _band_note(radius: list, shaded: list, alpha: float, row: dict) -> str:
    """Words for the bands without a drawn interval: infinite (with the smallest finite α) or too narrow."""
    level = f"{100 * (1 - alpha):.0f}% conformal intervals (α = {alpha:g})"
    infinite = [b for b, r in enumerate(radius) if r is None or not math.isfinite(r)]
    narrow = [b for b, r in enumerate(radius) if b not in shaded and b not in infinite]
    lines = []
    if infinite:
        sizes = row.get("gap_calibration_sizes") or []
        which = "all bands" if len(infinite) == len(radius) else f"{len(infinite)} band(s)"
        lines.append(f"{level}:\ninfinite for {which}")
        if sizes and min(sizes) > 0:
            n = min(sizes)
            lines.append(f"(n = {n} calibration structures give\nfinite ones only for α ≥ 1/(n+1) = {1 / (n + 1):.3g})")
    if narrow:
        width = max(2 * radius[b] for b in narrow)
        lines.append(f"{level} of {len(narrow)} band(s)\n≤ {_width_text(width)} wide: below the resolution")
    return "\n".join(lines)
