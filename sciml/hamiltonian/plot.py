"""Orbital-level diagram: predicted levels with conformal intervals, beside the reference (DFT) levels."""

from __future__ import annotations

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
