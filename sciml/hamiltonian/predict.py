"""Predict Kohn–Sham Hamiltonians, orbital energies and HOMO–LUMO gaps of molecules: read → predict → refine → write.

Per molecule: read the geometry (Å, :mod:`sciml.hamiltonian.inputs`) → pyscf builds the overlap ``S`` and the
zeroth-step ``H0`` (Fock matrix of the minao initial-guess density) in the model's basis
(:mod:`sciml.hamiltonian.scf.molecule`) → the network predicts ``H`` → orbital energies from ``H C = S C ε`` with
split-conformal intervals (:mod:`sciml.hamiltonian.intervals`) → optionally a few self-consistent Fock builds
(:mod:`sciml.hamiltonian.refined`) or the SCF residual (:mod:`sciml.hamiltonian.scf.residual`) → files
(:mod:`sciml.hamiltonian.write`). Results are :class:`~sciml.hamiltonian.results.MoleculePrediction`. Models load
with :func:`sciml.hamiltonian.artifact.load_model`; crystal models predict in :mod:`sciml.hamiltonian.bands`. pyscf
is needed for ``S`` and ``H0`` of new geometries (extra ``quantum``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.artifact import DEFAULT_MODEL, HamiltonianPredictor, load_model
from sciml.hamiltonian.chunks import MAX_PAIRS, Prepared, chunks
from sciml.hamiltonian.data.batch import collate
from sciml.hamiltonian.data.sample import structure_to_sample
from sciml.hamiltonian.embed import h0_embedding
from sciml.hamiltonian.inputs import check_elements, read_frames
from sciml.hamiltonian.intervals import orbital_intervals
from sciml.hamiltonian.results import MoleculePrediction
from sciml.hamiltonian.scf.molecule import ZerothStep, check_closed_shell, zeroth_step
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.write import Written, write_prediction

__all__ = ["molecule_structure", "predict", "predict_files", "predict_structures"]


def molecule_structure(numbers, positions, step: ZerothStep, layout, source: str) -> HamiltonianStructure:
    """The network's input: a molecule with the ``H0`` and ``S`` of ``step`` as e3nn-order blocks."""
    return HamiltonianStructure.from_dense(numbers, positions, {"H0": step.h0, "S": step.overlap}, layout,
                                           meta={"n_occupied": int(step.n_occupied), "source": source})


def _batch_notes(iv_note: str, borrowed, p: float | None, beta: float | None, size: str | None = None) -> str:
    """One molecule's note: larger than the training molecules, out of domain, deep orbitals, the batch's note."""
    note = iv_note
    if borrowed is not None and bool(borrowed.any()):
        note = (f"{int(borrowed.sum())} orbitals lie deeper than the deepest calibration group and take its width "
                "(pooled deep orbitals of the calibration molecules; no per-orbital guarantee for orbitals deeper "
                "than any of them)" + (f"; {note}" if note else ""))
    if p is not None and not p > beta:
        note = (f"out of domain (domain p-value {p:.3g} <= beta {beta:g}): unlike the training structures; the "
                "intervals carry no coverage guarantee" + (f"; {note}" if note else ""))
    if size:
        note = size + (f"; {note}" if note else "")
    return note


@torch.no_grad()
def predict_structures(structures: list[HamiltonianStructure], predictor: HamiltonianPredictor,
                       alpha: float | None = 0.1, beta: float | None = None, shift_aware: bool = False,
                       min_ess: float = 50.0) -> list[MoleculePrediction]:
    """Predicted ``H``, orbital energies with conformal intervals, HOMO–LUMO gap and domain verdict; one network call.

    With a domain test (``domain.json``) every molecule gets ``domain_pvalue`` and ``in_domain`` (``p > β``; ``β``
    defaults to the model's); ``None`` for models without one. A molecule larger than every training molecule
    (``metadata.json``'s ``training_domain``, :mod:`sciml.hamiltonian.sizes`) is ``in_domain: false`` whatever its
    p-value, with a note saying so. Intervals of an out-of-domain molecule carry no guarantee. ``structures``
    carry ``H0`` and ``S`` blocks and ``meta["n_occupied"]``, ``meta["source"]``.
    """
    m = predictor.module
    nb, eb = m.node_basis, m.edge_basis
    samples = [structure_to_sample(s, predictor.layout, nb, eb, float(m.meta.get("cutoff", 100.0)),
                                   int(m.meta.get("n_virtual", 3)), with_target=False) for s in structures]
    batch = collate(samples)
    pred = m.predict_step(batch)
    eps = pred.mean.double()
    dom = predictor.domain
    emb = h0_embedding(batch, nb, eb) if dom is not None else None
    beta = (dom.beta if dom is not None else None) if beta is None else beta
    pvalue = dom.pvalue(emb) if dom is not None else None
    iv = orbital_intervals(predictor, eps, batch, emb, alpha, shift_aware, min_ess)
    out, k0 = [], 0
    for g, s in enumerate(structures):
        n, k, occ = int(batch.n_ao[g]), int(batch.n_eig[g]), int(batch.n_occ[g])
        a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
        rows = slice(k0, k0 + k)
        k0 += k
        p = None if pvalue is None else float(pvalue[g])
        size = None if predictor.training is None else predictor.training.beyond(s.numbers)
        in_domain = False if size else None if p is None else bool(p > beta)
        note = _batch_notes(iv.note, None if iv.borrowed is None else iv.borrowed[rows], p, beta, size)
        out.append(MoleculePrediction(
            s.meta.get("source", ""), pred.meta["hamiltonian"][a:b].reshape(n, n).numpy(), eps[rows].numpy(),
            iv.lower[rows].numpy(), iv.upper[rows].numpy(), occ, alpha, p, in_domain, beta, iv.method,
            iv.method != "none" and in_domain is not False and not iv.note, note))
    return out


@contextmanager
def _timed(timings: dict | None, stage: str):
    """Add the wall seconds of the block to ``timings[stage]`` (nothing when ``timings`` is None)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if timings is not None:
            timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def predict_files(paths, predictor: HamiltonianPredictor, output: str | Path | None, alpha: float | None = 0.1,
                  references=None, plot: bool = False, progress: bool = True, beta: float | None = None,
                  shift_aware: bool = False, min_ess: float = 50.0, batch_size: int = 16,
                  max_pairs: int = MAX_PAIRS, timings: dict | None = None, residual: bool = False,
                  refine: int = 0, cache_mb: float | None = None) -> Iterator[Written]:
    """Yield one :class:`~sciml.hamiltonian.write.Written` per molecule, after writing ``<output>/<stem>/``.

    Each frame ``k`` of a multi-frame ``.xyz`` is one molecule, written to ``<stem>_<k>/``; ``output`` None writes
    nothing. Inputs stream through in chunks (:mod:`sciml.hamiltonian.chunks`: ``batch_size`` molecules,
    ``max_pairs`` atom pairs, one network call each); ``shift_aware`` compares the whole batch with the calibration
    data, so it holds every input at once (one chunk). A progress bar on stderr (terminals only) names the stage.

    ``refine`` > 0: each prediction is refined by that many Fock builds (:mod:`sciml.hamiltonian.refined`) by the
    solver that built its H0; it keeps its density-fitting factors until its chunk is written, and coarse-grid AO
    values (at most ``cache_mb`` MB, default :data:`sciml.hamiltonian.scf.refine.CACHE_MB`) during its own builds;
    a chunk also closes before its solvers exceed ``cache_mb`` in all. ``residual``: the SCF residual of each
    prediction and its H MAE bound (:mod:`sciml.hamiltonian.scf.residual`).

    ``timings``: a dict to which the wall seconds of each stage are added: ``read``, ``h0_overlap`` (pyscf S and
    H0), ``network`` (graphs, model, intervals), ``residual``, ``refine``, ``write``; ``network_calls`` counts calls.
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
    paths = list(paths)
    size, pairs = (math.inf, math.inf) if shift_aware else (batch_size, max_pairs)
    bar = tqdm(total=len(paths), desc="molecules", unit="structure", file=sys.stderr,
               disable=None if progress else True)
    try:
        items = (_prepare(*molecule, predictor, bar, timings, cache)
                 for molecule in _molecules(paths, references, predictor, bar, timings))
        for chunk in chunks(items, size, pairs, cache):
            bar.set_postfix_str(f"network ({len(chunk)} molecule(s))")
            with _timed(timings, "network"):
                results = predict_structures([it.structure for it in chunk], predictor, alpha, beta, shift_aware,
                                             min_ess)
            if timings is not None:
                timings["network_calls"] = timings.get("network_calls", 0) + 1
            for item, result in zip(chunk, results, strict=True):
                yield _finish(item, result, predictor, output, alpha, plot, refine, residual, bar, timings)
    finally:
        bar.close()


def _finish(item: Prepared, result: MoleculePrediction, predictor, output, alpha, plot: bool, refine: int,
            residual: bool, bar, timings) -> Written:
    """Refine, check the residual, write one molecule (the stages it was asked for)."""
    numbers = item.structure.numbers
    if refine:
        from sciml.hamiltonian.refined import refine_prediction

        bar.set_postfix_str(f"{item.name}: refine ({refine} Fock builds)")
        with _timed(timings, "refine"):
            result = refine_prediction(result, numbers, item.step, predictor.layout, predictor.refined, refine, alpha)
    if residual:
        from sciml.hamiltonian.scf.residual import check_residual, scf_residual

        bar.set_postfix_str(f"{item.name}: SCF residual")
        with _timed(timings, "residual"):
            r = scf_residual(numbers, item.structure.positions, predictor.layout.to_pyscf(result.hamiltonian, numbers),
                             predictor.basis, predictor.xc, predictor.h0, source=result.source)
            check = check_residual(r, predictor.residual, alpha)
            result = result.with_note(check.text, residual=check)
    written = Written(result)
    if output is not None:
        bar.set_postfix_str(f"{item.name}: write")
        with _timed(timings, "write"):
            written = write_prediction(Path(output) / item.name, item, result, predictor, plot)
    bar.update()
    return written


def _molecules(paths, references, predictor: HamiltonianPredictor, bar, timings: dict | None):
    """Yield ``(folder name, source, numbers (n,), positions (n, 3) Å, reference path or None)`` per molecule.

    Each frame of a multi-frame ``.xyz`` is one molecule: source ``file.xyz@k``, folder ``<stem>_<k>`` (k from 0,
    four digits); a single-frame file keeps ``<stem>``. ``--reference`` pairs one H with each single-frame file.
    Elements and the electron count are checked when the file is read, before any pyscf work.
    """
    for k, path in enumerate(paths):
        with _timed(timings, "read"):
            numbers, frames = read_frames(path)
            check_closed_shell(numbers, str(path))
            check_elements(numbers, predictor.layout, str(path),
                           known=None if predictor.training is None else predictor.training.elements)
        if len(frames) == 1:
            yield Path(path).stem, str(path), numbers, frames[0], references[k] if references else None
            continue
        if references:
            raise ValueError(f"{path}: holds {len(frames)} frames; --reference takes one H per single-frame .xyz")
        bar.total += len(frames) - 1
        bar.refresh()
        for f, positions in enumerate(frames):
            yield f"{Path(path).stem}_{f:04d}", f"{path}@{f}", numbers, positions, None


def _prepare(name: str, source: str, numbers, positions, reference_path, predictor: HamiltonianPredictor, bar,
             timings: dict | None = None, cache_mb: float = 0.0) -> Prepared:
    """Build one molecule's S and H0 with pyscf (and its Fock builds when ``cache_mb`` > 0); read its reference H."""
    bar.set_postfix_str(f"{Path(source).name}: pyscf H0, S")
    with _timed(timings, "h0_overlap"):
        step = zeroth_step(numbers, positions, predictor.basis, predictor.xc, predictor.layout, source,
                           h0=predictor.h0, cache_mb=cache_mb)
        structure = molecule_structure(numbers, positions, step, predictor.layout, source)
    reference = None
    if reference_path is not None:
        with _timed(timings, "read"):
            reference = np.load(reference_path, allow_pickle=False)
        if reference.shape != step.overlap.shape:
            raise ValueError(f"{reference_path}: reference H has shape {reference.shape}, the molecule in "
                             f"{source} needs {step.overlap.shape} (pyscf AO order, {predictor.basis})")
    return Prepared(name, structure, step, reference)


def predict(inputs: Iterable[str | Path], model: str | HamiltonianPredictor = DEFAULT_MODEL, alpha: float | None = 0.1,
            output: str | Path | None = None, refine: int = 0, residual: bool = False, beta: float | None = None,
            batch_size: int = 16) -> list[MoleculePrediction]:
    """Predict the molecules of ``.xyz`` files (each frame one molecule) with a molecule model.

    Parameters
    ----------
    inputs : iterable of str or Path
        ``.xyz`` files (Å).
    model : str, Path or HamiltonianPredictor
        Shipped model name or artifact folder (default: the water model), or a loaded model.
    alpha : float or None
        Miscoverage of the orbital-energy intervals (None: no intervals).
    output : str or Path, optional
        Folder to write each molecule's files to (``<output>/<stem>/``, as ``sciml hamiltonian predict``).
    refine : int
        Self-consistent Fock builds after the network (0: none).
    residual : bool
        Also compute each prediction's SCF residual and H MAE bound.
    beta : float, optional
        Domain flag level (default: the model's).
    batch_size : int
        Molecules per network call.

    Returns
    -------
    list of MoleculePrediction
        In input order.

    Examples
    --------
    >>> from sciml.hamiltonian import predict
    >>> [p.gap.gap for p in predict(["examples/hamiltonian/water.xyz"], model="water-pbe-def2svp")]  # doctest: +SKIP

    """
    predictor = model if isinstance(model, HamiltonianPredictor) else load_model(model)
    if predictor.periodic:
        raise ValueError(f"{predictor.path}: a crystal model; predict crystals with `sciml hamiltonian predict` "
                         "(sciml.hamiltonian.bands.predict_crystal_inputs)")
    return [w.prediction for w in predict_files(list(inputs), predictor, output, alpha, progress=False, beta=beta,
                                                batch_size=batch_size, residual=residual, refine=refine)]
