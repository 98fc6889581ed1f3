"""Predict Kohn–Sham Hamiltonians, orbital energies and HOMO–LUMO gaps of molecules.

Models load with :func:`sciml.hamiltonian.artifact.load_model` (crystals predict in :mod:`sciml.hamiltonian.bands`).

Pipeline per molecule: read the geometry (Å) → pyscf builds the overlap ``S`` and the zeroth-step ``H0``
(Fock matrix of the minao initial-guess density) in the model's basis → the network predicts ``H`` → orbital
energies from ``H C = S C ε`` with split-conformal intervals (the artifact's calibrator, fitted on the
calibration split's orbital energies). pyscf is needed for ``S`` and ``H0`` of new geometries (extra
``quantum``).
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.artifact import HamiltonianPredictor
from sciml.hamiltonian.data.batch import collate
from sciml.hamiltonian.data.sample import structure_to_sample
from sciml.hamiltonian.domain import orbital_groups, outside_groups
from sciml.hamiltonian.embed import h0_embedding
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.scf.refine_calibration import core_orbitals
from sciml.hamiltonian.scf.residual import RESIDUAL_KEYS, residual_fields
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV


def read_frames(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers ``(n,)`` and positions ``(n_frames, n, 3)`` in Å of a (multi-frame) ``.xyz`` file.

    Parsed by :func:`sciml.hamiltonian.data.gen_molecules.read_xyz_frames` (ase; its one-line errors for
    unreadable files, unknown elements, NaN or duplicated atoms, frames with other atoms).
    """
    from sciml.hamiltonian.data.gen_molecules import read_xyz_frames

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return read_xyz_frames(path)


def read_xyz(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers ``(n,)`` and positions ``(n, 3)`` in Å of a single-frame ``.xyz`` file."""
    numbers, frames = read_frames(path)
    if len(frames) != 1:
        raise ValueError(f"{path}: holds {len(frames)} frames; expected one molecule")
    return numbers, frames[0]


def check_elements(numbers, layout: OrbitalLayout, source: str) -> None:
    """Raise a one-line ValueError naming elements the model was not trained on."""
    from ase.data import chemical_symbols

    unknown = sorted({int(z) for z in numbers} - set(layout.elements()))
    if unknown:
        names = ", ".join(chemical_symbols[z] for z in unknown)
        known = ", ".join(chemical_symbols[z] for z in layout.elements())
        raise ValueError(f"{source}: element(s) {names} are outside the trained orbital basis ({known}); "
                         "use a model trained on these elements")


def zeroth_step(numbers, positions, basis: str, xc: str, layout: OrbitalLayout, source: str = "input",
                grid_level: int = 3, h0: str = "full", cache_mb: float = 0.0) -> dict:
    """Pyscf ``S`` and ``H0`` (pyscf AO order, Hartree) and the number of doubly occupied orbitals.

    ``h0`` is how the model's training data built H0 (:mod:`sciml.hamiltonian.scf.h0`: ``"full"`` or ``"fast"``).
    ``cache_mb`` > 0: also ``"solver"``, the refinement's Fock builds
    (:class:`sciml.hamiltonian.scf.two_grid.TwoGridFock`: the fine solver with its density-fitting factors, H0 and
    its density; coarse-grid AO values up to ``cache_mb`` MB once it builds).
    Raises ImportError (one line) without pyscf, ValueError when pyscf's basis differs from the model's.
    """
    from sciml.hamiltonian.data.generate import import_pyscf

    import_pyscf()
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver, zeroth_step_matrices

    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions, strict=True)], basis=basis,
                unit="Angstrom", verbose=0)
    if mol.nelectron % 2:
        raise ValueError(f"{source}: {mol.nelectron} electrons (open shell); only closed shells are supported")
    got = OrbitalLayout.from_pyscf_mol(mol)
    for z in set(int(v) for v in numbers):
        if got.shells_of(z) != layout.shells_of(z):
            raise ValueError(f"{source}: basis {basis!r} gives shells {got.shells_of(z)} for Z={z}, the model was "
                             f"trained with {layout.shells_of(z)}; use the training basis")
    if cache_mb <= 0:
        return zeroth_step_matrices(mol, xc, grid_level, h0) | {"n_occupied": mol.nelectron // 2}
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    solver = fock_solver(mol, xc, grid_level, h0, keep_factors=True)
    out = zeroth_step_matrices(mol, xc, grid_level, h0, solver, with_density=True)
    return {"H0": out["H0"], "S": out["S"], "n_occupied": mol.nelectron // 2,
            "solver": TwoGridFock(solver, out["H0"], out["D0"], cache_mb)}


def structure_from_matrices(numbers, positions, mats: dict, layout: OrbitalLayout, n_occupied: int,
                            source: str) -> HamiltonianStructure:
    """A molecule with ``H0`` and ``S`` (pyscf order) converted to e3nn blocks; clear errors if one is missing."""
    for name in ("H0", "S"):
        if mats.get(name) is None:
            what = "overlap S" if name == "S" else "zeroth-step H0"
            raise ValueError(f"{source}: missing {what}; the model needs both H0 and S (computed with pyscf)")
    return HamiltonianStructure.from_dense(numbers, positions, {k: mats[k] for k in ("H0", "S")},
                                           layout, meta={"n_occupied": int(n_occupied), "source": source})


@dataclass
class BatchIntervals:
    """Orbital-energy intervals of a batch (Hartree, ``(K,)``) and what they mean."""

    lower: torch.Tensor
    upper: torch.Tensor
    method: str  # "none", "split (pooled)", "mondrian by orbital", "... shift-aware"
    note: str = ""  # batch-level note (the shift-aware ESS guard)


def orbital_intervals(predictor: HamiltonianPredictor, eps: torch.Tensor, batch, emb: torch.Tensor | None,
                      alpha: float | None, shift_aware: bool = False, min_ess: float = 50.0) -> BatchIntervals:
    """Intervals of the calibrator kind the artifact holds (pooled split; Mondrian by orbital, normalised by σ(x)).

    ``shift_aware``: weighted conformal against the batch (:mod:`sciml.hamiltonian.shift`), ``+inf`` under the
    ESS guard. ``emb``: raw embeddings ``(G, d)`` (needed by normalised and shift-aware intervals).
    """
    cal = predictor.calibrator
    nan = torch.full_like(eps, math.nan)
    if cal is None or alpha is None:
        if shift_aware:
            raise ValueError(f"{predictor.path}: --shift-aware needs a calibrated model")
        return BatchIntervals(nan, nan, "none")
    rows = torch.repeat_interleave(torch.arange(int(batch.num_graphs)), batch.n_eig)
    if getattr(cal, "method", None) != "mondrian":
        if shift_aware:
            raise ValueError(f"{predictor.path}: --shift-aware needs a model exported with a domain test "
                             "(domain.json, per-orbital calibrator); re-export it or drop --shift-aware")
        interval = cal.predict_set(eps, alpha=alpha)
        return BatchIntervals(interval.lower, interval.upper, "split conformal, pooled over orbitals")
    groups = orbital_groups(batch.n_eig, batch.n_occ, cal.group_ids)
    sigma = (predictor.domain.sigma(emb)[rows] if cal.score_name == "normalized" else torch.ones_like(eps))
    if shift_aware:
        from sciml.hamiltonian.shift import shift_thresholds

        res = shift_thresholds(predictor.domain, emb, rows, groups, alpha, min_ess)
        q, method = res.thresholds, "weighted conformal against the batch, per orbital"
        note = (f"shift-aware: effective sample size {res.ess:.1f} of the calibration weights is below "
                f"{res.ess_floor:.1f}: the guarded orbitals' intervals are infinite (no claim rather than false "
                "confidence)"
                if res.guarded else "")
    else:
        q, method, note = cal.threshold_or_inf(groups, alpha), "split conformal, Mondrian by orbital", ""
    half = q * sigma
    return BatchIntervals(eps - half, eps + half, method + (", normalised by σ(x)" if cal.score_name == "normalized"
                                                            else ""), note)


@torch.no_grad()
def predict_structures(structures: list[HamiltonianStructure], predictor: HamiltonianPredictor,
                       alpha: float | None = 0.1, beta: float | None = None, shift_aware: bool = False,
                       min_ess: float = 50.0) -> list[dict]:
    """Predicted ``H`` (e3nn order), orbital energies with conformal intervals, HOMO–LUMO gap, domain p-value.

    The gap interval combines the HOMO and LUMO intervals, ``[lo_L − hi_H, hi_L − lo_H]``, so it covers with
    probability ≥ 1 − 2α (Bonferroni) when each orbital interval covers with ≥ 1 − α. With a domain test
    (``domain.json``) every molecule gets ``domain_pvalue`` and ``in_domain`` (``p > β``; ``β`` defaults to the
    model's); ``None`` for models without one. Intervals of an out-of-domain molecule carry no guarantee.
    """
    m = predictor.module
    meta = m.meta
    nb, eb = m.node_basis, m.edge_basis
    samples = [structure_to_sample(s, predictor.layout, nb, eb, float(meta.get("cutoff", 100.0)),
                                   int(meta.get("n_virtual", 3)), with_target=False) for s in structures]
    batch = collate(samples)
    pred = m.predict_step(batch)
    eps = pred.mean.double()
    dom = predictor.domain
    emb = h0_embedding(batch, nb, eb) if dom is not None else None
    beta = (dom.beta if dom is not None else None) if beta is None else beta
    pvalue = dom.pvalue(emb) if dom is not None else None
    iv = orbital_intervals(predictor, eps, batch, emb, alpha, shift_aware, min_ess)
    cal = predictor.calibrator
    borrowed = (outside_groups(batch.n_eig, batch.n_occ, cal.group_ids)
                if iv.method != "none" and getattr(cal, "method", None) == "mondrian" else None)
    out, k0 = [], 0
    for g, s in enumerate(structures):
        n, k, occ = int(batch.n_ao[g]), int(batch.n_eig[g]), int(batch.n_occ[g])
        a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
        e, lo, hi = eps[k0:k0 + k], iv.lower[k0:k0 + k], iv.upper[k0:k0 + k]
        k0 += k
        p = None if pvalue is None else float(pvalue[g])
        in_domain = None if p is None else bool(p > beta)
        note = iv.note
        if borrowed is not None and bool(borrowed[k0 - k:k0].any()):
            note = (f"{int(borrowed[k0 - k:k0].sum())} orbitals lie deeper than the deepest calibration group "
                    "and take its width (pooled deep orbitals of the calibration molecules; no per-orbital "
                    "guarantee for orbitals deeper than any of them)" + (f"; {note}" if note else ""))
        if in_domain is False:
            note = (f"out of domain (domain p-value {p:.3g} <= beta {beta:g}): unlike the training structures; the "
                    "intervals carry no coverage guarantee" + (f"; {note}" if note else ""))
        res = {"source": s.meta.get("source", ""), "hamiltonian": pred.meta["hamiltonian"][a:b].reshape(n, n).numpy(),
               "orbital_energies": e.tolist(), "lower": lo.tolist(), "upper": hi.tolist(), "n_occupied": occ,
               "alpha": alpha, "domain_pvalue": p, "in_domain": in_domain, "domain_beta": beta,
               "intervals": iv.method, "interval_guarantee": iv.method != "none" and in_domain is not False
               and not iv.note, "note": note}
        out.append(res | _gap_fields(e, lo, hi, occ))
    return out


def _gap_fields(eps, lower, upper, n_occupied: int) -> dict:
    """HOMO, LUMO, gap and its Bonferroni interval (Hartree); empty without a virtual orbital."""
    occ = n_occupied
    if len(eps) <= occ:
        return {}
    return {"homo": float(eps[occ - 1]), "lumo": float(eps[occ]), "gap": float(eps[occ] - eps[occ - 1]),
            "gap_lower": float(lower[occ] - upper[occ - 1]), "gap_upper": float(upper[occ] - lower[occ - 1])}


def refine_result(structure: HamiltonianStructure, result: dict, s_pyscf: np.ndarray, solver,
                  predictor: HamiltonianPredictor, steps: int, alpha: float | None) -> dict:
    """``result`` of :func:`predict_structures` after ``steps`` self-consistent Fock builds.

    The refinement is :func:`sciml.hamiltonian.scf.refine.refine` with the Fock builds ``solver``
    (:class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock` of :func:`zeroth_step`; released after). H, orbital
    energies, HOMO/LUMO/gap are the refined ones. Intervals: from the artifact's refined calibrator when it was
    fitted for these ``steps`` (:mod:`sciml.hamiltonian.scf.refine_calibration`; a guarantee like the unrefined ones);
    otherwise each keeps its unrefined width around the refined energy, marked without guarantee. Adds
    ``refine_steps``, ``refine_residuals_microhartree`` (mean |F[D(H_i)] − H_i| of each evaluated iterate) and
    ``refine_last_change_hartree`` (each orbital's ``ε_K − ε_{K−1}``, the change in the last build).
    """
    from scipy.linalg import eigh

    from sciml.hamiltonian.scf.refine import refine

    if steps < 1:
        raise ValueError(f"refine_result needs at least one Fock build, got {steps}")

    layout, occ = predictor.layout, result["n_occupied"]
    start = layout.to_pyscf(result["hamiltonian"], structure.numbers)
    out = refine(start, solver, s_pyscf, occ, steps, keep_history=True)
    solver.release()
    k = len(result["orbital_energies"])
    eps, before = (eigh(h, s_pyscf, eigvals_only=True)[:k] for h in (out.hamiltonian, ([start] + out.history)[-2]))
    cal = predictor.refined
    text = f"refined by {steps} Fock builds (last residual {out.residuals[-1]:.0f} µHa)"
    if alpha is None:
        lo = hi = np.full(k, math.nan)
        method, guarantee = "none", False
    elif cal is not None and cal.steps == steps:
        lo, hi = cal.intervals(eps, eps - before, occ, alpha, core_orbitals(structure.numbers))
        scaled = ", scaled by each orbital's change in the last build" if cal.floor is not None else ""
        core = " (core orbitals one group)" if cal.core else ""
        method = f"split conformal, Mondrian by orbital{core}{scaled}, refined by {steps} Fock builds"
        guarantee = result["in_domain"] is not False
    else:
        shift = eps - np.asarray(result["orbital_energies"])
        lo, hi = np.asarray(result["lower"]) + shift, np.asarray(result["upper"]) + shift
        method, guarantee = result["intervals"] + ", widths of the unrefined model", False
        text += ("; intervals keep the unrefined model's widths (no guarantee for refined energies: the model has "
                 f"no refined calibrator for {steps} builds)")
    note = result.get("note") or ""
    return result | {"hamiltonian": layout.to_e3nn(out.hamiltonian, structure.numbers),
                     "orbital_energies": eps.tolist(), "lower": lo.tolist(), "upper": hi.tolist(),
                     "intervals": method, "interval_guarantee": guarantee,
                     "note": f"{note}; {text}" if note else text,
                     "refine_steps": steps, "refine_residuals_microhartree": out.residuals,
                     "refine_last_change_hartree": (eps - before).tolist()} | _gap_fields(
        eps, lo, hi, occ)


def _ev(values) -> list[float]:
    return [float(v) * HARTREE_EV for v in values]


#: fields of :func:`refine_result` copied into ``eigenvalues.json``
REFINE_KEYS = ("refine_steps", "refine_residuals_microhartree", "refine_last_change_hartree")


def write_prediction(folder: Path, structure: HamiltonianStructure, result: dict, s_pyscf: np.ndarray,
                     predictor: HamiltonianPredictor, reference: np.ndarray | None = None) -> dict:
    """Write one molecule's outputs (atomically, each file) and return its summary row (eV).

    Files: the DeepH folder ``deeph/`` (``hamiltonians.h5``, ``overlaps.h5``, ``hamiltonians_0.h5``; Hartree),
    ``hamiltonian.npy`` and ``overlap.npy`` (pyscf AO order, Hartree: ``pyscf`` users load them directly),
    ``eigenvalues.json`` (orbital energies, intervals, HOMO/LUMO/gap in Hartree and eV).
    """
    import json

    from sciml.core.io.atomic import atomic_open, atomic_write_text
    from sciml.hamiltonian.data.deeph import write_deeph

    layout, numbers = predictor.layout, structure.numbers
    h_e3nn = result["hamiltonian"]
    h_pyscf = layout.to_pyscf(h_e3nn, numbers)
    folder.mkdir(parents=True, exist_ok=True)
    for name, mat in (("hamiltonian.npy", h_pyscf), ("overlap.npy", s_pyscf)):
        with atomic_open(folder / name, "wb") as handle:
            np.save(handle, mat)
    out = HamiltonianStructure.from_dense(numbers, structure.positions, {"H": h_e3nn}, layout,
                                          meta=dict(structure.meta) | {"model": str(predictor.path)}, order="e3nn")
    out.blocks |= {k: v for k, v in structure.blocks.items() if k in ("S", "H0")}
    write_deeph(folder / "deeph", out, layout)
    row = {"source": result["source"], "folder": str(folder), "n_occupied": result["n_occupied"],
           "alpha": result["alpha"], "basis": predictor.basis, "xc": predictor.xc,
           "orbital_energies_hartree": result["orbital_energies"], "lower_hartree": result["lower"],
           "upper_hartree": result["upper"], "orbital_energies_ev": _ev(result["orbital_energies"]),
           "lower_ev": _ev(result["lower"]), "upper_ev": _ev(result["upper"]),
           "homo_ev": float(result["orbital_energies"][result["n_occupied"] - 1]) * HARTREE_EV,
           **{k: result[k] for k in ("domain_pvalue", "in_domain", "domain_beta", "intervals", "interval_guarantee",
                                     "note")},
           **{k: result[k] for k in RESIDUAL_KEYS + REFINE_KEYS if k in result}}
    if "gap" in result:
        row |= {k + "_ev": result[k] * HARTREE_EV for k in ("homo", "lumo", "gap", "gap_lower", "gap_upper")}
    if reference is not None:
        from scipy.linalg import eigh

        k = len(result["orbital_energies"])
        ref = eigh(reference, s_pyscf, eigvals_only=True)[:k]
        row["reference_orbital_energies_ev"] = _ev(ref)
        row["h_mae_microhartree"] = float(np.abs(h_pyscf - reference).mean() * 1e6)
    atomic_write_text(folder / "eigenvalues.json", json.dumps(row, indent=1))
    return row


#: most directed atom pairs ``Σ n_atoms²`` in one network call: the ridge's features grow with them (~0.25 MB per
#: pair in float64: 4096 pairs ≈ 1 GB), so a chunk of large molecules closes before ``batch_size`` is reached
MAX_PAIRS = 4096


@contextmanager
def _timed(timings: dict | None, stage: str):
    """Add the wall seconds of the block to ``timings[stage]`` (nothing when ``timings`` is None)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if timings is not None:
            timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def predict_files(paths, predictor: HamiltonianPredictor, output: str | Path, alpha: float = 0.1,
                  references=None, plot: bool = False, progress: bool = True, beta: float | None = None,
                  shift_aware: bool = False, min_ess: float = 50.0, batch_size: int = 16,
                  max_pairs: int = MAX_PAIRS, timings: dict | None = None, residual: bool = False,
                  refine: int = 0, cache_mb: float | None = None):
    """Yield one summary row per molecule after writing its folder ``<output>/<stem>/``.

    Each frame ``k`` of a multi-frame ``.xyz`` is one molecule, written to ``<stem>_<k>/`` (:func:`_molecules`).

    Inputs stream through in chunks: pyscf builds S and H0 of each input (one ``Mole`` per input), and when the
    chunk holds ``batch_size`` molecules, or the next one would take it past ``max_pairs`` directed atom pairs
    (``Σ n_atoms²``, bounded memory for large molecules; a larger single molecule goes alone), one network call
    predicts it and its folders are written. ``shift_aware`` compares the whole batch with the calibration
    data, so it holds every input's matrices at once (one chunk). A progress bar on stderr (terminals only)
    counts molecules and names the stage (pyscf H0/S, network, write).

    ``refine`` > 0: each prediction is refined by that many self-consistent Fock builds (:func:`refine_result`),
    made on a coarse grid corrected to the H0 build's (:mod:`sciml.hamiltonian.scf.two_grid`) by the solver that
    built its H0. The solver keeps its density-fitting factors until its chunk is written, and the AO values on the
    coarse grid (at most ``cache_mb`` MB, default :data:`sciml.hamiltonian.scf.refine.CACHE_MB`) during its own builds
    only (:mod:`sciml.hamiltonian.scf.numint_cache`); a chunk also closes before the solvers it holds exceed
    ``cache_mb`` in all.

    ``timings``: a dict to which the wall seconds of each stage are added: ``read`` (``.xyz`` and reference
    files), ``h0_overlap`` (pyscf S and H0), ``network`` (:func:`predict_structures`: graphs, model, orbital
    energies, intervals), ``residual`` (with ``residual``: the SCF residual of each prediction and its H MAE
    bound, :mod:`sciml.hamiltonian.scf.residual`), ``refine`` (with ``refine``), ``write`` (output folders, plots);
    ``network_calls`` counts the calls.
    """
    from tqdm.auto import tqdm

    from sciml.hamiltonian.scf.refine import CACHE_MB

    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if refine < 0:
        raise ValueError(f"--refine must be >= 0 Fock builds, got {refine}")
    if refine and residual:
        raise ValueError("--refine and --residual: the refinement reports its own residuals "
                         "(refine_residuals_microhartree); drop --residual")
    if refine and shift_aware:
        raise ValueError("--refine and --shift-aware: shift-aware intervals are for unrefined predictions; drop one")
    cache = (CACHE_MB if cache_mb is None else cache_mb) if refine else 0.0
    output, paths = Path(output), list(paths)
    size, pairs = (math.inf, math.inf) if shift_aware else (batch_size, max_pairs)
    bar = tqdm(total=len(paths), desc="molecules", unit="structure", file=sys.stderr,
               disable=None if progress else True)
    flush = partial(_predict_chunk, predictor=predictor, output=output, alpha=alpha, beta=beta,
                    shift_aware=shift_aware, min_ess=min_ess, plot=plot, bar=bar, timings=timings,
                    residual=residual, refine=refine)
    pending: list[tuple[str, tuple]] = []  # (folder name, (structure, S, reference, solver)) waiting for the network
    try:
        for name, source, numbers, positions, reference in _molecules(paths, references, predictor, bar, timings):
            item = _prepare(source, numbers, positions, predictor, reference, bar, timings, cache)
            held = sum(len(it[0].numbers) ** 2 for _, it in pending)
            held_mb = sum(_solver_mb(it[3]) for _, it in pending)
            if pending and (held + len(item[0].numbers) ** 2 > pairs or held_mb + _solver_mb(item[3]) > cache):
                yield from flush(pending)
                pending = []
            pending.append((name, item))
            if len(pending) >= size:
                yield from flush(pending)
                pending = []
        if pending:
            yield from flush(pending)
    finally:
        bar.close()


def _solver_mb(solver) -> float:
    """MB the refinement's Fock builds hold (:attr:`TwoGridFock.nbytes`; 0 for None)."""
    return 0.0 if solver is None else solver.nbytes / 1e6


def _predict_chunk(pending, predictor, output: Path, alpha, beta, shift_aware, min_ess, plot, bar, timings,
                   residual: bool = False, refine: int = 0):
    """One network call for the prepared ``[(folder name, (structure, S, reference, solver))]``; write, yield rows."""
    bar.set_postfix_str(f"network ({len(pending)} molecule(s))")
    with _timed(timings, "network"):
        results = predict_structures([it[0] for _, it in pending], predictor, alpha, beta, shift_aware, min_ess)
    if timings is not None:
        timings["network_calls"] = timings.get("network_calls", 0) + 1
    for (name, (structure, s_pyscf, reference, solver)), result in zip(pending, results, strict=True):
        folder = output / name
        if refine:
            bar.set_postfix_str(f"{name}: refine ({refine} Fock builds)")
            with _timed(timings, "refine"):
                result = refine_result(structure, result, s_pyscf, solver, predictor, refine, alpha)
        if residual:
            bar.set_postfix_str(f"{name}: SCF residual")
            with _timed(timings, "residual"):
                result |= residual_fields(structure, result, predictor, alpha)
        bar.set_postfix_str(f"{name}: write")
        with _timed(timings, "write"):
            row = write_prediction(folder, structure, result, s_pyscf, predictor, reference)
            if plot:
                from sciml.hamiltonian.plot import plot_levels

                row["plot"] = str(plot_levels(row, folder / "levels.png"))
        bar.update()
        yield row


def _molecules(paths, references, predictor: HamiltonianPredictor, bar, timings: dict | None):
    """Yield ``(folder name, source, numbers (n,), positions (n, 3) Å, reference path or None)`` per molecule.

    Each frame of a multi-frame ``.xyz`` is one molecule: source ``file.xyz@k``, folder ``<stem>_<k>`` (k from 0,
    four digits); a single-frame file keeps ``<stem>``. ``--reference`` pairs one H with each single-frame file.
    """
    for k, path in enumerate(paths):
        with _timed(timings, "read"):
            numbers, frames = read_frames(path)
            check_elements(numbers, predictor.layout, str(path))
        if len(frames) == 1:
            yield Path(path).stem, str(path), numbers, frames[0], references[k] if references else None
            continue
        if references:
            raise ValueError(f"{path}: holds {len(frames)} frames; --reference takes one H per single-frame .xyz")
        bar.total += len(frames) - 1
        bar.refresh()
        for f, positions in enumerate(frames):
            yield f"{Path(path).stem}_{f:04d}", f"{path}@{f}", numbers, positions, None


def _prepare(source: str, numbers, positions, predictor: HamiltonianPredictor, reference_path, bar,
             timings: dict | None = None, cache_mb: float = 0.0):
    """Build one molecule's S and H0 with pyscf (``source`` names it in messages and rows).

    Returns ``(structure, S (pyscf order), reference H or None, Fock builds or None)``; the builds
    (:class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock`, ``cache_mb`` > 0) are kept for the refinement.
    """
    bar.set_postfix_str(f"{Path(source).name}: pyscf H0, S")
    with _timed(timings, "h0_overlap"):
        mats = zeroth_step(numbers, positions, predictor.basis, predictor.xc, predictor.layout, source,
                           h0=predictor.h0, cache_mb=cache_mb)
        structure = structure_from_matrices(numbers, positions, mats, predictor.layout, mats["n_occupied"], source)
    reference = None
    if reference_path is not None:
        with _timed(timings, "read"):
            reference = np.load(reference_path, allow_pickle=False)
        if reference.shape != mats["S"].shape:
            raise ValueError(f"{reference_path}: reference H has shape {reference.shape}, the molecule in "
                             f"{source} needs {mats['S'].shape} (pyscf AO order, {predictor.basis})")
    return structure, mats["S"], reference, mats.get("solver")
