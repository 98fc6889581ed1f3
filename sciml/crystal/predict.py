"""Batch prediction from structure files with conformal intervals and an applicability-domain flag.

Each row carries the conformal domain p-value of the structure (:mod:`sciml.crystal.domain`) and
``in_domain``: ``False`` when ``p <= β``, when the structure has an element never seen in training, when its
cell size is outside the training range, or when its cell holds a vacuum layer of 10 Å or more (a slab, or a
molecule or cluster in a box: :mod:`sciml.crystal.vacuum`).
The interval of an out-of-domain row carries no guarantee and its ``note`` says so in one line.

Rows stream with bounded memory (one batch of structures at a time), except with ``shift_aware``: the
weighted conformal thresholds (:mod:`sciml.crystal.shift`) compare the whole input batch with the
calibration data, so predictions and embeddings (``d`` floats per structure) are held until the end.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from itertools import islice

import pandas as pd
import torch
from pymatgen.core import Element
from tqdm.auto import tqdm

from sciml.core.elements import MAX_Z
from sciml.core.pyg import Batch  # before sciml.crystal imports torch_geometric: start-up without torch._dynamo
from sciml.core.structures import StructureError
from sciml.crystal.artifact import DEFAULT_MODEL, CrystalPredictor, load_model
from sciml.crystal.data.graphs import structure_to_graph
from sciml.crystal.data.sources import iter_structures
from sciml.crystal.shift import shift_thresholds
from sciml.crystal.vacuum import vacuum_note
from sciml.uq.groups import hurdle_members, predict_interval, structure_groups
from sciml.uq.hurdle import HurdleConformal

NO_GUARANTEE = "the interval carries no guarantee"
UNBOUNDED = "unbounded interval: too few calibration structures of this kind for a bound (no claim)"
CLASS_WIDE = ("few calibration structures share this one's groups: its set is calibrated over all metals or all "
              "non-metals, not over its groups")


def columns(target: dict) -> list[str]:
    """CSV columns of ``crystal predict`` (docs/design.md §2), plus domain, ``note`` and ``error``.

    A zero-inflated target (band gap) adds ``p_<zero_label>`` (``p_metal``), the probability that it is 0, and
    ``<zero_label>_in_set`` (``metal_in_set``): whether 0 is in the set (:class:`~sciml.uq.sets.ZeroOrInterval`;
    ``False`` with ``lower == 0`` reads "not a metal, gap at most ``upper``").
    """
    name = target["name"]
    p_zero = [zero_column(target), zero_set_column(target)] if target.get("zero_inflated") else []
    return ["source", "formula", "n_atoms", name, f"{name}_lower", f"{name}_upper", *p_zero, "alpha",
            "domain_pvalue", "in_domain", "note", "error"]


def zero_column(target: dict) -> str:
    """Column of the probability that a zero-inflated target is 0 (``p_metal`` for band gaps)."""
    return f"p_{target.get('zero_label', 'zero')}"


def zero_set_column(target: dict) -> str:
    """Column saying whether 0 is in a zero-inflated target's set (``metal_in_set`` for band gaps)."""
    return f"{target.get('zero_label', 'zero')}_in_set"


def unseen_elements(structure, predictor: CrystalPredictor) -> list[str]:
    """Elements of ``structure`` outside the training vocabulary; raise for elements beyond the descriptor table."""
    symbols = sorted({el.symbol for el in structure.composition.elements})
    beyond = [s for s in symbols if Element(s).Z > MAX_Z]
    if beyond:
        raise StructureError("", f"unsupported element(s) {', '.join(beyond)}: the element table covers H..Lr "
                             f"(Z <= {MAX_Z})", "remove these atoms or use another model")
    return [s for s in symbols if s not in predictor.elements]


def domain_note(unseen: list[str], pvalue: float, beta: float, size: str = "") -> str:
    """One-line note of an out-of-domain row (``""`` when in domain or when nothing is known)."""
    reasons = [f"elements not seen in training: {' '.join(unseen)}"] if unseen else []
    if size:
        reasons.append(size)
    if pvalue <= beta:
        reasons.append(f"domain p-value {pvalue:.3g} <= {beta:g}")
    return f"out of domain ({'; '.join(reasons)}): {NO_GUARANTEE}" if reasons else ""


def _featurise(items, predictor: CrystalPredictor):
    """Split checked ``(source, structure|error)`` items into graphs to run and error rows."""
    good, errors = [], {}
    for k, (source, item) in enumerate(items):
        try:
            if isinstance(item, Exception):
                raise item
            unseen = unseen_elements(item, predictor)
            good.append((k, source, item, unseen, structure_to_graph(item, predictor.graph, source)))
        except StructureError as err:  # the error text names the file, like every reader error
            errors[k] = {"source": source, "error": str(StructureError(source, err.reason, err.fix))}
    return good, errors


@torch.no_grad()
def _run(good, predictor: CrystalPredictor) -> dict:
    """Forward pass: ``mean``, ``sigma`` ``(m,)`` float64, ``emb`` ``(m, d)`` or None, ``pvalue`` ``(m,)``."""
    batch = Batch.from_data_list([g for *_, g in good])
    pred = predictor.module.predict_step(batch)
    out = {"mean": pred.mean.double(), "sigma": pred.sigma.double(), "emb": None,
           "pvalue": torch.full((len(good),), math.nan, dtype=torch.float64)}
    if "p_zero" in pred.meta:  # zero-inflated: probability of 0 and the value if not
        out |= {"p_zero": pred.meta["p_zero"].double(), "positive": pred.meta["positive"].double()}
    if predictor.domain is not None:
        out["emb"] = predictor.module.embed(batch, predictor.domain.layer).double()
        out["pvalue"] = predictor.domain.pvalue(out["emb"])
    return out


def _rows(good, run: dict, lower, upper, predictor: CrystalPredictor, alpha, beta: float,
          extra: dict[int, str] | None = None) -> dict[int, dict]:
    target, rows = predictor.target["name"], {}
    extra = {**run.get("set_notes", {}), **(extra or {})}
    known = predictor.domain is not None
    for i, (k, source, structure, unseen, _) in enumerate(good):
        p, n = float(run["pvalue"][i]), len(structure)
        size = "" if not known or predictor.domain.size_known(n) else (
            "cell of {} atoms, training cells have {}-{}".format(n, *predictor.domain.train_sizes))
        rules = "; ".join(x for x in (size, vacuum_note(structure)) if x)  # outside what any bulk model saw
        in_domain = False if unseen or rules else (p > beta if known else None)
        unbounded = UNBOUNDED if math.isinf(float(upper[i])) and i not in extra else ""
        note = "; ".join(x for x in (domain_note(unseen, p, beta, rules), extra.get(i, ""), unbounded) if x)
        rows[k] = {"source": source, "formula": structure.composition.reduced_formula, "n_atoms": len(structure),
                   target: float(run["mean"][i]), f"{target}_lower": float(lower[i]),
                   f"{target}_upper": float(upper[i]), "alpha": alpha, "domain_pvalue": p,
                   "in_domain": in_domain, "note": note, "error": ""}
        if "p_zero" in run:
            rows[k][zero_column(predictor.target)] = float(run["p_zero"][i])
            rows[k][zero_set_column(predictor.target)] = bool(run["zero_in_set"][i]) if "zero_in_set" in run else ""
    return rows


def _plain_interval(good, run: dict, predictor: CrystalPredictor, alpha):
    nan = torch.full_like(run["mean"], math.nan)
    if predictor.calibrator is None or alpha is None:
        return nan, nan
    if isinstance(predictor.calibrator, HurdleConformal):
        groups = hurdle_members(predictor.calibrator, [structure for _, _, structure, _, _ in good])
        sets = predictor.calibrator.predict_set(run["p_zero"], run["positive"], alpha, **groups)
        run["mean"] = predictor.calibrator.point(run["p_zero"], run["positive"], alpha, **groups)  # inside it
        run["zero_in_set"] = sets.zero
        if hasattr(predictor.calibrator, "class_wide"):
            wide = predictor.calibrator.class_wide(groups["members"], alpha)
            run["set_notes"] = {i: CLASS_WIDE for i in torch.nonzero(wide).flatten().tolist()}
        return sets.lower, sets.upper
    interval = predict_interval(predictor.calibrator, run["mean"], run["sigma"], alpha,
                                [structure for _, _, structure, _, _ in good])  # groups if Mondrian
    return interval.lower, interval.upper


def _groups(good, predictor: CrystalPredictor):
    group_by = getattr(predictor.calibrator, "group_by", None)
    return structure_groups(group_by, [s for _, _, s, _, _ in good]) if isinstance(group_by, str) else None


def _check_shift_aware(predictor: CrystalPredictor, alpha) -> None:
    if predictor.domain is None or predictor.calibrator is None or alpha is None:
        raise ValueError(f"{predictor.path}: --shift-aware needs a calibrated model with domain.json and an alpha; "
                         "re-export with `sciml export --calibrate` or drop --shift-aware")
    if not hasattr(predictor.calibrator, "score_fn") or not isinstance(
            getattr(predictor.calibrator, "group_by", None), str | None):
        raise ValueError(f"{predictor.path}: --shift-aware works with split and Mondrian calibrators; this model's "
                         f"is '{predictor.calibrator.method}': drop --shift-aware")
    if not predictor.shift_current:
        raise ValueError(f"{predictor.path}: calibrator.json was replaced after domain.json was made, so its "
                         "shift-aware scores are stale; run `sciml crystal calibrate --operation domain` on the "
                         "model, or drop --shift-aware")


def _shift_rows(pending: list, predictor: CrystalPredictor, alpha: float, beta: float, min_ess: float) -> dict:
    """Rows of every held batch with weighted conformal intervals against all of them together."""
    good = [item for batch_good, _ in pending for item in batch_good]
    if not good:
        return {}
    run = {key: torch.cat([r[key] for _, r in pending]) for key in ("mean", "sigma", "emb", "pvalue")}
    groups = _groups(good, predictor)
    result = shift_thresholds(predictor.domain, run["emb"], groups, alpha, min_ess)
    interval = predictor.calibrator.score_fn.predict_set(run["mean"], result.thresholds, run["sigma"])
    extra = {}
    for i in range(len(good)):
        g = 0 if groups is None else int(groups[i])
        if g in result.guarded:
            extra[i] = (f"shift-aware: effective calibration size {result.ess[g]:.0f} too small against this batch: "
                        "infinite interval (no claim)")
        elif g not in result.ess:
            extra[i] = "shift-aware: no calibration data in this group: infinite interval (no claim)"
        elif math.isinf(float(result.thresholds[i])):
            extra[i] = "shift-aware: far from the calibration data (own weight beyond alpha): infinite interval"
    return _rows(good, run, interval.lower, interval.upper, predictor, alpha, beta, extra)


def iter_prediction_rows(inputs: Iterable, predictor: CrystalPredictor, alpha: float | None = 0.1,
                         batch_size: int = 64, progress: bool = False, beta: float | None = None,
                         shift_aware: bool = False, min_ess: float = 50.0) -> Iterator[dict]:
    """Yield one row per input structure (a bad input yields a row with ``error`` set).

    Memory is bounded by ``batch_size`` structures: inputs are read lazily, featurised and predicted one
    batch at a time (with ``shift_aware``, predictions and embeddings are held until every input is read).
    With ``progress`` a bar on stderr counts structures per batch (drawn on a terminal only).

    Parameters
    ----------
    inputs : iterable
        Paths and/or structures (:func:`predict`).
    predictor : CrystalPredictor
        Loaded model.
    alpha : float or None
        Miscoverage of the intervals (``None``: no interval).
    batch_size : int
        Structures per forward pass.
    progress : bool
        Progress bar on stderr.
    beta : float, optional
        Domain flag level (default: the artifact's, 0.05): a row is out of domain when ``p <= beta``.
    shift_aware : bool
        Weighted conformal intervals against all inputs together (:mod:`sciml.crystal.shift`).
    min_ess : float
        ESS floor of the shift-aware guard.

    """
    if shift_aware:
        _check_shift_aware(predictor, alpha)
    beta = beta if beta is not None else (predictor.domain.beta if predictor.domain is not None else 0.05)
    if not 0 < beta < 1:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    items = iter_structures(inputs)
    bar = tqdm(desc="predict", unit="structure", file=sys.stderr, disable=None if progress else True)
    pending, chunks = [], []
    while chunk := list(islice(items, batch_size)):
        good, errors = _featurise(chunk, predictor)
        run = _run(good, predictor) if good else None
        bar.update(len(chunk))
        if shift_aware:
            pending.append((good, run) if good else ([], None))
            chunks.append((len(chunk), good, errors))
            continue
        rows = (_rows(good, run, *_plain_interval(good, run, predictor, alpha), predictor, alpha, beta)
                if good else {}) | errors
        yield from (_ordered(rows, k, predictor) for k in range(len(chunk)))
    bar.close()
    if shift_aware:
        shifted = _shift_rows([p for p in pending if p[1] is not None], predictor, alpha, beta, min_ess)
        offset = 0
        for size, good, errors in chunks:
            rows = {k: shifted[offset + i] for i, (k, *_) in enumerate(good)} | errors
            offset += len(good)
            yield from (_ordered(rows, k, predictor) for k in range(size))


def _ordered(rows: dict, k: int, predictor: CrystalPredictor) -> dict:
    return {c: rows[k].get(c) for c in columns(predictor.target)}


def predict(structures: Iterable, model: str | CrystalPredictor = DEFAULT_MODEL, alpha: float | None = 0.1,
            batch_size: int = 64, beta: float | None = None, shift_aware: bool = False,
            min_ess: float = 50.0) -> pd.DataFrame:
    """Predict a crystal property with conformal intervals and an applicability-domain flag.

    Parameters
    ----------
    structures : iterable
        Paths (files, folders, CSV with a ``cif`` column) and/or pymatgen ``Structure`` / ASE ``Atoms``.
    model : str or CrystalPredictor
        Artifact folder, shipped model name (``"mp-formation-energy"``, the default) or a loaded predictor.
    alpha : float or None
        Miscoverage of the intervals (``None``: no interval).
    batch_size : int
        Structures per forward pass.
    beta : float, optional
        Domain flag level (default: the artifact's, 0.05).
    shift_aware : bool
        Weighted conformal intervals against the whole input batch, with the ESS guard (``min_ess``).
    min_ess : float
        ESS floor of the shift-aware guard (:mod:`sciml.crystal.shift`).

    Returns
    -------
    pandas.DataFrame
        Columns ``source, formula, n_atoms, <target>, <target>_lower, <target>_upper, alpha, domain_pvalue,
        in_domain, note, error``. ``in_domain`` is ``False`` for a structure with ``domain_pvalue <= beta`` or an
        element never seen in training (its interval carries no guarantee; ``note`` says so), ``None`` when the
        model has no ``domain.json`` and the structure has only known elements.

    """
    if isinstance(structures, (str, bytes)) or not isinstance(structures, Iterable):
        structures = [structures]
    predictor = model if isinstance(model, CrystalPredictor) else load_model(model)
    rows = list(iter_prediction_rows(structures, predictor, alpha, batch_size, beta=beta, shift_aware=shift_aware,
                                     min_ess=min_ess))
    return pd.DataFrame(rows, columns=columns(predictor.target))
