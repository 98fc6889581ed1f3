"""Batch prediction from structure files with conformal intervals, streaming with bounded memory."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from itertools import islice

import pandas as pd
import torch
from pymatgen.core import Element
from torch_geometric.data import Batch
from tqdm.auto import tqdm

from sciml.core.elements import MAX_Z
from sciml.core.structures import StructureError
from sciml.crystal.artifact import DEFAULT_MODEL, CrystalPredictor, load_model
from sciml.crystal.data.graphs import structure_to_graph
from sciml.crystal.data.sources import iter_structures
from sciml.uq.groups import predict_interval


def columns(target: str) -> list[str]:
    """CSV columns of ``crystal predict`` (docs/design.md §2), plus ``error``."""
    return ["source", "formula", "n_atoms", target, f"{target}_lower", f"{target}_upper", "alpha", "note", "error"]


def unseen_note(structure, predictor: CrystalPredictor) -> str:
    """Flag elements outside the training vocabulary; raise for elements outside the descriptor table."""
    symbols = sorted({el.symbol for el in structure.composition.elements})
    beyond = [s for s in symbols if Element(s).Z > MAX_Z]
    if beyond:
        raise StructureError("", f"unsupported element(s) {', '.join(beyond)}: the element table covers H..Lr "
                             f"(Z <= {MAX_Z})", "remove these atoms or use another model")
    unseen = [s for s in symbols if s not in predictor.elements]
    if not unseen:
        return ""
    return (f"elements not seen in training: {' '.join(unseen)} (descriptor-only embedding; extrapolation, "
            "the interval has no guarantee here)")


def _featurise(items, predictor: CrystalPredictor):
    """Split checked ``(source, structure|error)`` items into graphs to run and error rows."""
    good, errors = [], {}
    for k, (source, item) in enumerate(items):
        try:
            if isinstance(item, Exception):
                raise item
            note = unseen_note(item, predictor)
            good.append((k, source, item, note, structure_to_graph(item, predictor.graph, source)))
        except StructureError as err:
            errors[k] = {"source": source, "error": err.reason + (f" (fix: {err.fix})" if err.fix else "")}
    return good, errors


@torch.no_grad()
def _predict_batch(good, predictor: CrystalPredictor, alpha: float | None) -> dict[int, dict]:
    target = predictor.target["name"]
    pred = predictor.module.predict_step(Batch.from_data_list([g for *_, g in good]))
    lower = upper = torch.full_like(pred.mean, math.nan)
    if predictor.calibrator is not None and alpha is not None:
        interval = predict_interval(predictor.calibrator, pred.mean.double(), pred.sigma.double(), alpha,
                                    [structure for _, _, structure, _, _ in good])  # groups if Mondrian
        lower, upper = interval.lower, interval.upper
    rows = {}
    for i, (k, source, structure, note, _) in enumerate(good):
        rows[k] = {"source": source, "formula": structure.composition.reduced_formula, "n_atoms": len(structure),
                     target: float(pred.mean[i]), f"{target}_lower": float(lower[i]),
                   f"{target}_upper": float(upper[i]), "alpha": alpha, "note": note, "error": ""}
    return rows


def iter_prediction_rows(inputs: Iterable, predictor: CrystalPredictor, alpha: float | None = 0.1,
                         batch_size: int = 64, progress: bool = False) -> Iterator[dict]:
    """Yield one row per input structure (a bad input yields a row with ``error`` set).

    Memory is bounded by ``batch_size`` structures: inputs are read lazily, featurised and predicted one
    batch at a time. With ``progress`` a bar on stderr counts structures per batch (drawn on a terminal only).
    """
    items = iter_structures(inputs)
    bar = tqdm(desc="predict", unit="structure", file=sys.stderr, disable=None if progress else True)
    while chunk := list(islice(items, batch_size)):
        good, errors = _featurise(chunk, predictor)
        rows = (_predict_batch(good, predictor, alpha) if good else {}) | errors
        for k in range(len(chunk)):
            yield {c: rows[k].get(c) for c in columns(predictor.target["name"])}
        bar.update(len(chunk))
    bar.close()


def predict(structures: Iterable, model: str | CrystalPredictor = DEFAULT_MODEL, alpha: float | None = 0.1,
            batch_size: int = 64) -> pd.DataFrame:
    """Predict a crystal property with conformal intervals.

    Parameters
    ----------
    structures : iterable
        Paths (files, folders, CSV with a ``cif`` column) and/or pymatgen ``Structure`` / ASE ``Atoms``.
    model : str or CrystalPredictor
        Artifact folder or an already loaded predictor.
    alpha : float or None
        Miscoverage of the intervals (``None``: no interval).
    batch_size : int
        Structures per forward pass.

    Returns
    -------
    pandas.DataFrame
        Columns ``source, formula, n_atoms, <target>, <target>_lower, <target>_upper, alpha, error``.

    """
    if isinstance(structures, (str, bytes)) or not isinstance(structures, Iterable):
        structures = [structures]
    predictor = model if isinstance(model, CrystalPredictor) else load_model(model)
    rows = list(iter_prediction_rows(structures, predictor, alpha, batch_size))
    return pd.DataFrame(rows, columns=columns(predictor.target["name"]))
