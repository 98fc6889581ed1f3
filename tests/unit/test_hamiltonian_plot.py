"""The orbital-level plot: a window of levels around the gap, one column each, and a caption for the rest."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sciml.core.io.figures as figures
from sciml.hamiltonian.plot import plot_levels


def _row(n: int = 60, occ: int = 30, width: float = 2.0) -> dict:
    """Synthetic levels (eV): 4 core orbitals, then valence levels 0.3 eV apart with overlapping intervals."""
    eps = np.concatenate([np.linspace(-520.0, -280.0, 4), np.linspace(-30.0, 5.0, n - 4)])
    lo, hi = list(eps - width / 2), list(eps + width / 2)
    lo[occ - 2], hi[occ - 2] = -math.inf, math.inf  # HOMO−1: infinite interval
    return {
        "source": "big.xyz",
        "n_occupied": occ,
        "alpha": 0.1,
        "orbital_energies_ev": eps.tolist(),
        "lower_ev": lo,
        "upper_ev": hi,
        "gap_ev": float(eps[occ] - eps[occ - 1]),
        "gap_lower_ev": 0.1,
        "gap_upper_ev": 2.4,
        "reference_orbital_energies_ev": (eps + 0.05).tolist(),
    }


@pytest.fixture
def captured(monkeypatch):
    """The figure ``plot_levels`` hands to ``save_png``, kept open for inspection."""
    figs = []
    original = figures.save_png

    def keep(fig, path, dpi=120):
        figs.append(fig)
        texts = [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]
        fig.sciml_texts = texts
        return original(fig, path, dpi)

    monkeypatch.setattr(figures, "save_png", keep)
    return figs


def test_window_of_sixty_orbitals_png_and_caption(tmp_path, captured):
    path = plot_levels(_row(), tmp_path / "levels.png", per_side=8)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = captured[0]
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) == 16 and labels[0] == "H−7" and labels[7:9] == ["HOMO", "LUMO"] and labels[-1] == "L+7"
    assert "16 of 60 levels" in fig.axes[0].get_title()
    text = "\n".join(fig.sciml_texts)
    assert "22 deeper occupied level(s) not shown (4 core" in text
    assert "22 higher virtual level(s) not shown" in text
    assert "∞" in text and "1 level(s) with an infinite" in text
    assert "gap" in text and "[0.10, 2.40]" in text


def test_small_molecule_drops_core_and_tiny_intervals_are_stated(tmp_path, captured):
    eps = [-509.8, -24.3, -12.5, -8.3, -6.2, 0.8, 2.9, 14.2]
    row = {
        "source": "water.xyz",
        "n_occupied": 5,
        "alpha": 0.1,
        "orbital_energies_ev": eps,
        "lower_ev": [e - 1e-5 for e in eps],
        "upper_ev": [e + 1e-5 for e in eps],
        "gap_ev": 7.0,
    }
    plot_levels(row, tmp_path / "levels.png")
    labels = [t.get_text() for t in captured[0].axes[0].get_xticklabels()]
    assert labels == ["H−3", "H−2", "H−1", "HOMO", "LUMO", "L+1", "L+2"]
    text = "\n".join(captured[0].sciml_texts)
    assert "below the plot's resolution" in text and "1 core" in text
