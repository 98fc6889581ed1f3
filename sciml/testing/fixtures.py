"""Tiny, deterministic datasets the project generates itself for tests and demos (no downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pymatgen.core import Element, Lattice, Structure
from pymatgen.io.cif import CifWriter

A_SITES = ("Sr", "Ba", "Ca", "K", "Na", "La")
B_SITES = ("Ti", "Zr", "Nb", "Al", "Ta")


def perovskite(a_site: str, b_site: str, x_site: str = "O", lattice: float = 3.95, jitter: float = 0.0,
               rng: np.random.Generator | None = None) -> Structure:
    """Cubic ABX3 perovskite (5-atom cell): A at the corner, B at the body centre, X at face centres."""
    frac = np.array([[0, 0, 0], [.5, .5, .5], [.5, .5, 0], [.5, 0, .5], [0, .5, .5]], dtype=float)
    if jitter and rng is not None:
        frac = frac + rng.normal(scale=jitter / lattice, size=frac.shape)
    return Structure(Lattice.cubic(lattice), [a_site, b_site, x_site, x_site, x_site], frac)


def synthetic_energy(structure: Structure) -> float:
    """A smooth, physically flavoured toy target (eV per cell): electronegativity mismatch + strain.

    ``E = Σ_i (χ_i − χ̄)² − 0.8 Σ_{pairs<3.2 Å} 1/r + 2 (a − a₀)²``, with ``a₀`` from ionic radii. Not a
    real formation energy; it only has to be learnable from structure.
    """
    chi = np.array([Element(str(s)).X for s in structure.species])
    pair = structure.distance_matrix[np.triu_indices(len(structure), 1)]
    a0 = 2 * (Element(str(structure.species[1])).atomic_radius + Element("O").atomic_radius)
    return float(((chi - chi.mean()) ** 2).sum() - 0.8 * (1 / pair[pair < 3.2]).sum()
                 + 2 * (structure.lattice.a - a0) ** 2)


def write_perovskite_csv(path: str | Path, n: int = 60, seed: int = 0) -> Path:
    """Write a perov5-format CSV (``material_id, cif, formula, heat_all``) of ``n`` jittered perovskites."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a_site, b_site = A_SITES[i % len(A_SITES)], B_SITES[(i // len(A_SITES)) % len(B_SITES)]
        s = perovskite(a_site, b_site, lattice=float(rng.uniform(3.7, 4.3)), jitter=0.05, rng=rng)
        rows.append({"material_id": f"toy-{i}", "cif": str(CifWriter(s)), "formula": s.composition.reduced_formula,
                     "heat_all": synthetic_energy(s)})
    path = Path(path)
    pd.DataFrame(rows).to_csv(path)
    return path
