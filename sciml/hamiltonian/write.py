"""Write one molecule's prediction to its folder: matrices, DeepH files and ``eigenvalues.json`` (docs/design.md §3).

Files (each written atomically): ``hamiltonian.npy`` and ``overlap.npy`` (pyscf AO order, Hartree: pyscf users load
them directly), the DeepH folder ``deeph/`` (``hamiltonians.h5``, ``overlaps.h5``, ``hamiltonians_0.h5``; Hartree),
``eigenvalues.json`` (:func:`summary`: orbital energies, intervals, HOMO/LUMO/gap in Hartree and eV, the domain
verdict, refinement and residual when made) and, on request, ``levels.png``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sciml.hamiltonian.artifact import HamiltonianPredictor
from sciml.hamiltonian.chunks import Prepared
from sciml.hamiltonian.results import MoleculePrediction
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV

__all__ = ["Written", "summary", "write_prediction"]


@dataclass(frozen=True)
class Written:
    """One predicted molecule: its result and where its files went (``folder`` None when nothing was written)."""

    prediction: MoleculePrediction
    folder: Path | None = None
    plot: Path | None = None


def _ev(values) -> list[float]:
    return [float(v) * HARTREE_EV for v in values]


def summary(result: MoleculePrediction, folder: Path, predictor: HamiltonianPredictor) -> dict:
    """The ``eigenvalues.json`` record of ``result`` (Hartree and eV; key order as written)."""
    row = {"source": result.source, "folder": str(folder), "n_occupied": result.n_occupied, "alpha": result.alpha,
           "basis": predictor.basis, "xc": predictor.xc,
           "orbital_energies_hartree": result.orbital_energies.tolist(), "lower_hartree": result.lower.tolist(),
           "upper_hartree": result.upper.tolist(), "orbital_energies_ev": _ev(result.orbital_energies),
           "lower_ev": _ev(result.lower), "upper_ev": _ev(result.upper), "homo_ev": result.homo * HARTREE_EV,
           "domain_pvalue": result.domain_pvalue, "in_domain": result.in_domain, "domain_beta": result.domain_beta,
           "intervals": result.intervals, "interval_guarantee": result.interval_guarantee, "note": result.note}
    if result.residual is not None:
        check = result.residual
        row |= {"scf_residual_microhartree": check.residual, "h_mae_bound_microhartree": check.bound,
                "h_mae_bound_alpha": check.alpha}
    if result.refined is not None:
        rec = result.refined
        row |= {"refine_steps": rec.steps, "refine_method": rec.method, "refine_residuals_microhartree": rec.residuals,
                "refine_last_change_hartree": rec.last_change.tolist()}
    gap = result.gap
    if gap is not None:
        row |= {"homo_ev": gap.homo * HARTREE_EV, "lumo_ev": gap.lumo * HARTREE_EV, "gap_ev": gap.gap * HARTREE_EV,
                "gap_lower_ev": gap.lower * HARTREE_EV, "gap_upper_ev": gap.upper * HARTREE_EV}
    return row


def write_prediction(folder: Path, item: Prepared, result: MoleculePrediction, predictor: HamiltonianPredictor,
                     plot: bool = False) -> Written:
    """Write the files of one molecule (module docstring) under ``folder``.

    ``item``: the molecule as prepared for the network (structure, S, and a reference H, whose orbital energies
    and H MAE then join ``eigenvalues.json``).
    """
    from sciml.core.io.atomic import atomic_open, atomic_write_text
    from sciml.hamiltonian.data.deeph import write_deeph

    layout, structure, s_pyscf = predictor.layout, item.structure, item.step.overlap
    h_e3nn = result.hamiltonian
    h_pyscf = layout.to_pyscf(h_e3nn, structure.numbers)
    folder.mkdir(parents=True, exist_ok=True)
    for name, mat in (("hamiltonian.npy", h_pyscf), ("overlap.npy", s_pyscf)):
        with atomic_open(folder / name, "wb") as handle:
            np.save(handle, mat)
    out = HamiltonianStructure.from_dense(structure.numbers, structure.positions, {"H": h_e3nn}, layout,
                                          meta=dict(structure.meta) | {"model": str(predictor.path)}, order="e3nn")
    out.blocks |= {k: v for k, v in structure.blocks.items() if k in ("S", "H0")}
    write_deeph(folder / "deeph", out, layout)
    row = summary(result, folder, predictor)
    if item.reference is not None:
        from scipy.linalg import eigh

        ref = eigh(item.reference, s_pyscf, eigvals_only=True)[:len(result.orbital_energies)]
        row["reference_orbital_energies_ev"] = _ev(ref)
        row["h_mae_microhartree"] = float(np.abs(h_pyscf - item.reference).mean() * 1e6)
    atomic_write_text(folder / "eigenvalues.json", json.dumps(row, indent=1))
    drawn = None
    if plot:
        from sciml.hamiltonian.plot import plot_levels

        drawn = plot_levels(row, folder / "levels.png")
    return Written(result, folder, drawn)
