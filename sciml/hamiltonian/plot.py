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


def plot_levels(row: dict, path: str | Path, core_ev: float = -100.0, per_side: int = 8) -> Path:
    """Draw the frontier levels of one ``eigenvalues.json`` row (eV) to ``path`` (PNG, written atomically).

    Each drawn level has its own column (x: orbital counted from the HOMO, ``H−k`` … ``HOMO``, ``LUMO`` …
    ``L+k``), so overlapping intervals stay apart: a bar at the predicted energy (occupied solid, virtual dashed)
    and a thin error bar for its conformal interval. At most ``per_side`` occupied and ``per_side`` virtual levels
    around the gap are drawn; deeper occupied (and core, below ``core_ev``) and higher virtual levels are counted
    in the caption. The HOMO–LUMO gap is an arrow labelled with its value and interval (``gap_lower_ev`` …
    ``gap_upper_ev`` when the row has them). Reference (DFT) levels, when the row has
    ``reference_orbital_energies_ev``, are red diamonds beside each bar. An interval below the plot's resolution
    (~0.3% of the energy range) is not drawn and the caption states the largest width; an infinite (or
    uncalibrated) one is marked ∞.
    """
    from matplotlib.lines import Line2D

    from sciml.core.io.figures import save_png

    plt = _pyplot()
    eps, lo, hi = row["orbital_energies_ev"], row["lower_ev"], row["upper_ev"]
    ref, occ, alpha = row.get("reference_orbital_energies_ev"), row["n_occupied"], row.get("alpha")
    window = range(max(occ - per_side, 0), min(occ + per_side, len(eps)))
    shown = [k for k in window if eps[k] > core_ev] or list(window)
    x = {k: k - shown[0] for k in shown}
    finite = {k: hi[k] - lo[k] for k in shown if lo[k] == lo[k] and math.isfinite(hi[k] - lo[k])}
    span = max(eps[k] for k in shown) - min(eps[k] for k in shown) or 1.0
    visible = bool(finite) and max(finite.values()) > 0.003 * span
    fig, ax = plt.subplots(figsize=(max(3.6, 1.6 + 0.34 * len(shown)), 5.2))
    for k in shown:
        ax.hlines(eps[k], x[k] - 0.36, x[k] + 0.36, colors="C0", linestyles="-" if k < occ else "--", lw=1.8)
        if visible and k in finite:
            ax.errorbar(x[k], eps[k], yerr=[[eps[k] - lo[k]], [hi[k] - eps[k]]], color="C0", lw=0.9, capsize=2.5,
                        alpha=0.8)
        elif k not in finite and alpha:
            ax.text(x[k], eps[k], "∞", ha="center", va="bottom", fontsize=10, color="C3")
        if ref is not None:
            ax.plot(x[k] + 0.24, ref[k], "D", color="C3", ms=3.5)
    low = min([eps[k] for k in shown] + [lo[k] for k in finite if visible])
    top = max([eps[k] for k in shown] + [hi[k] for k in finite if visible])
    ax.set_xticks([x[k] for k in shown], [_orbital_name(k, occ) for k in shown], rotation=90, fontsize=7)
    ax.set_xlim(-0.7, len(shown) - 0.3)
    ax.set_ylabel("orbital energy (eV)")
    handles = [Line2D([], [], color="k", ls="-", label="occupied"), Line2D([], [], color="k", ls="--", label="virtual")]
    level = f"{100 * (1 - alpha):.0f}%" if alpha else None
    if level and visible:
        handles.append(Line2D([], [], color="C0", marker="_", ms=6, lw=0.9,
                              label=f"{level} conformal interval (α = {alpha:g})"))
    if ref is not None:
        handles.append(Line2D([], [], color="C3", marker="D", ms=3.5, ls="", label="DFT (reference)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left")
    ax.set_ylim(low - 0.06 * (top - low), top + 0.11 * (top - low) * len(handles))
    _gap_arrow(ax, row, x, occ, eps)
    notes = _level_notes(row, shown, window, finite, visible, level, core_ev)
    ax.set_title(f"{Path(str(row['source'])).name}: {len(shown)} of {len(eps)} levels, around the gap", fontsize=9)
    fig.tight_layout(rect=(0, 0.03 * len(notes), 1, 1))
    if notes:
        fig.text(0.02, 0.01, "\n".join(notes), fontsize=6.5, va="bottom")
    return save_png(fig, path)


def _orbital_name(k: int, occ: int) -> str:
    """``HOMO``, ``H−2``, ``LUMO``, ``L+3`` for orbital ``k`` (0-based) with ``occ`` occupied orbitals."""
    if k == occ - 1:
        return "HOMO"
    if k == occ:
        return "LUMO"
    return f"H−{occ - 1 - k}" if k < occ else f"L+{k - occ}"


def _gap_arrow(ax, row: dict, x: dict, occ: int, eps: list) -> None:
    """A double arrow from the HOMO to the LUMO between their columns; its label (gap and interval) below it."""
    if occ - 1 not in x or occ not in x:
        return
    homo, lumo = eps[occ - 1], eps[occ]
    mid = x[occ - 1] + 0.5
    ax.annotate("", xy=(mid, lumo), xytext=(mid, homo), arrowprops={"arrowstyle": "<->", "color": "0.3", "lw": 0.9})
    text = f"gap {row.get('gap_ev', lumo - homo):.2f} eV"
    lower, upper = row.get("gap_lower_ev"), row.get("gap_upper_ev")
    if lower is not None and upper is not None and math.isfinite(upper - lower):
        level = f" ({100 * (1 - row['alpha']):.0f}%)" if row.get("alpha") else ""
        text += (f"\n[{lower:.2f}, {upper:.2f}] eV{level}" if upper - lower >= 0.005
                 else f"\n± {_width_text((upper - lower) / 2)}{level}")
    elif lower is not None:
        text += "\ninterval infinite"
    lowest = min(homo, row["lower_ev"][occ - 1]) if math.isfinite(row["lower_ev"][occ - 1]) else homo
    bottom, top = ax.get_ylim()
    ax.text(mid, lowest - 0.02 * (top - bottom), text, ha="left", va="top", fontsize=7)  # levels rise to the
    # right, so the space below the HOMO's interval and right of the arrow is free


def _level_notes(row: dict, shown: list, window: range, finite: dict, visible: bool, level: str | None,
                 core_ev: float) -> list[str]:
    """Caption lines: levels left out (deeper, core, higher) and intervals that are not drawn."""
    eps, occ = row["orbital_energies_ev"], row["n_occupied"]
    notes = []
    if level and not visible and finite:
        notes.append(f"{level} conformal intervals (α = {row['alpha']:g}) ≤ {_width_text(max(finite.values()))} "
                     "wide: below the plot's resolution")
    n_inf = len(shown) - len(finite)
    if level and n_inf:
        notes.append(f"∞: {n_inf} level(s) with an infinite or uncalibrated {level} interval")
    deeper = [k for k in range(occ) if k not in shown]
    if deeper:
        core = sum(eps[k] <= core_ev for k in deeper)
        notes.append(f"{len(deeper)} deeper occupied level(s) not shown"
                     + (f" ({core} core, below {core_ev:.0f} eV)" if core else ""))
    if len(eps) > window.stop:
        notes.append(f"{len(eps) - window.stop} higher virtual level(s) not shown")
    return notes


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
