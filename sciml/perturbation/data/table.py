"""Load an AnnData file into a validated table of cells: log1p expression, condition keys, cell types.

A *condition key* is the canonical GEARS label (``ctrl``, ``A+ctrl``, ``A+B``); when a ``cell_type_key`` is given
it is suffixed with the cell type, ``A+B@k562`` (control: ``ctrl@k562``), so that the same perturbation in two
cell types is two conditions, each paired with the control cells of its own type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sciml.core.io.checksum import sha256_file
from sciml.perturbation.data.anndata_io import (
    DataError,
    check_conditions,
    check_gene_order,
    dense,
    log_expression,
    n_rows,
    read_h5ad_rows,
)
from sciml.perturbation.data.conditions import MAX_GENES, canonical_label, parse_condition

CELL_TYPE_SEP = "@"


@dataclass
class CellTable:
    """Validated cells of one file.

    Attributes
    ----------
    x : (cells, genes) float32, log1p expression: a dense array, or a scipy CSR matrix when the file's matrix is
        sparse (read a condition at a time with :func:`~sciml.perturbation.data.anndata_io.dense_rows`).
    var_names : gene symbols of the columns of ``x``.
    keys : (cells,) condition key of each cell.
    perturbation : condition key -> sorted tuple of perturbed genes (``()`` for control).
    cell_type : condition key -> cell type (``""`` without a cell-type column).
    source : file the cells came from; ``sha256`` its hash.

    """

    x: np.ndarray
    var_names: list[str]
    keys: np.ndarray
    perturbation: dict[str, tuple]
    cell_type: dict[str, str]
    source: str
    sha256: str = ""
    index: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        order = np.argsort(self.keys, kind="stable")
        bounds = np.flatnonzero(self.keys[order][1:] != self.keys[order][:-1]) + 1
        self.index = {str(self.keys[idx[0]]): idx for idx in np.split(order, bounds) if len(idx)}

    @property
    def n_cells(self) -> int:
        """Number of cells (rows of ``x``)."""
        return n_rows(self.x)

    def control_keys(self) -> list[str]:
        """Condition keys of control cells (one per cell type)."""
        return sorted(k for k, genes in self.perturbation.items() if not genes)


def make_key(label: str, cell_type: str = "") -> str:
    """Key of a canonical label in a cell type (``'A+B'`` or ``'A+B@k562'``)."""
    return f"{label}{CELL_TYPE_SEP}{cell_type}" if cell_type else label


def split_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`make_key`: ``(label, cell_type)``."""
    label, _, cell_type = key.partition(CELL_TYPE_SEP)
    return label, cell_type


def _subset_mask(obs, subset: dict | None, source: str) -> np.ndarray:
    mask = np.ones(len(obs), dtype=bool)
    for column, wanted in (subset or {}).items():
        if column not in obs.columns:
            raise DataError(f"{source}: data.subset names obs column {column!r}, which the file lacks")
        wanted = [wanted] if isinstance(wanted, str) else list(wanted)
        mask &= obs[column].astype(str).isin([str(w) for w in wanted]).to_numpy()
    if not mask.any():
        raise DataError(f"{source}: data.subset {subset} selects no cells")
    return mask


def load_table(path: str | Path, condition_key: str = "condition", control_label: str = "ctrl",
               counts_layer: str | None = None, target_sum: float = 1e4, cell_type_key: str | None = None,
               subset: dict | None = None, genes: list[str] | None = None) -> CellTable:
    """Read, validate and normalise an ``.h5ad`` file (see :mod:`sciml.perturbation.data.anndata_io` for the checks).

    ``genes`` (a frozen vocabulary) restricts and orders the columns; the file must hold them in that order.
    """
    source = str(path)
    adata = read_h5ad_rows(path, layers=[counts_layer] if counts_layer else [], x=counts_layer is None)
    check_conditions(adata.obs, source, condition_key, control_label)
    if cell_type_key is not None and cell_type_key not in adata.obs.columns:
        raise DataError(f"{source}: obs has no column {cell_type_key!r}; set data.cell_type_key to null or a column")
    if len(set(adata.var_names)) != adata.n_vars:
        raise DataError(f"{source}: var_names are not unique; run adata.var_names_make_unique()")
    mask = _subset_mask(adata.obs, subset, source)
    if not mask.all():  # a view of every cell would still copy X when read
        adata = adata[mask]
    var_names = [str(g) for g in adata.var_names]
    if genes is not None:
        check_gene_order(var_names, genes, source)
        if var_names != list(genes):
            adata = adata[:, list(genes)]
        var_names = list(genes)
    x = log_expression(adata, source, counts_layer, target_sum, owned=True)  # read here, dropped on return
    labels = adata.obs[condition_key].astype(str).to_numpy()
    types = adata.obs[cell_type_key].astype(str).to_numpy() if cell_type_key else np.full(len(labels), "")
    canon = {}
    for lab in np.unique(labels):
        try:
            canon[lab] = canonical_label(lab, control_label)
        except ValueError as err:
            raise DataError(f"{source}: obs[{condition_key!r}]: {err}") from err
        if len(parse_condition(lab, control_label)) > MAX_GENES:
            raise DataError(f"{source}: obs[{condition_key!r}] label {lab!r} perturbs more than {MAX_GENES} genes")
    keys = np.array([make_key(canon[lab], ct) for lab, ct in zip(labels, types, strict=True)])
    perturbation = {str(k): parse_condition(split_key(str(k))[0]) for k in np.unique(keys)}
    cell_type = {k: split_key(k)[1] for k in perturbation}
    for ct in sorted(set(cell_type.values())):
        if make_key("ctrl", ct) not in perturbation:
            raise DataError(f"{source}: cell type {ct!r} has no control cells; drop it with data.subset")
    digest = sha256_file(path)
    return CellTable(x=x, var_names=var_names, keys=keys, perturbation=perturbation, cell_type=cell_type,
                     source=source, sha256=digest)


@dataclass(frozen=True)
class ControlCells:
    """Control cells of a user's file on a frozen gene vocabulary (predict time).

    Attributes
    ----------
    x : (n, G) float32, log1p expression.
    counts : (n, G) int64 raw counts on the model's genes, or ``None`` when the file has no counts layer (the one
        named, else an integer-valued ``layers['counts']``).
    counts_layer : the layer ``counts`` came from, or ``None``.

    """

    x: np.ndarray
    counts: np.ndarray | None = None
    counts_layer: str | None = None


def read_control_cells(path: str | Path, genes: list[str], condition_key: str = "condition",
                       control_label: str = "ctrl", counts_layer: str | None = None, target_sum: float = 1e4,
                       reorder: bool = False, require_key: bool = False) -> np.ndarray:
    """Control cells (n, G) log1p of a user's file on a frozen gene vocabulary (:func:`read_controls`)."""
    return read_controls(path, genes, condition_key, control_label, counts_layer, target_sum, reorder,
                         require_key).x


def cap_rows(rows: np.ndarray, cap: int | None, seed: int = 0) -> np.ndarray:
    """``rows`` when ``cap`` is ``None`` or not exceeded, else ``cap`` of them drawn without replacement (sorted).

    The draw depends on ``(seed, len(rows))`` only. ``ValueError`` for a cap below 1.
    """
    if cap is None or len(rows) <= cap:
        return rows
    if int(cap) < 1:
        raise ValueError(f"the control-cell cap must be >= 1 (or null for all), got {cap}")
    rng = np.random.default_rng([seed, len(rows)])
    return np.sort(rng.choice(rows, int(cap), replace=False))


def read_controls(path: str | Path, genes: list[str], condition_key: str = "condition", control_label: str = "ctrl",
                  counts_layer: str | None = None, target_sum: float = 1e4, reorder: bool = False,
                  require_key: bool = False, max_cells: int | None = None, seed: int = 0) -> ControlCells:
    """Control cells of a user's file on a frozen gene vocabulary, with their raw counts when the file has them.

    Cells labelled ``control_label`` (or ``ctrl``) in ``obs[condition_key]`` are taken; a file without that column
    is taken to hold control cells only, unless ``require_key`` (the column was named by the user: its absence is
    an error naming the file). ``genes`` must appear in the file in this order, unless ``reorder`` (then the file's
    columns are selected and reordered by name; genes must still all be present). Expression is read from ``X``
    (log1p) or, with ``counts_layer``, normalised from that layer; the counts are that layer, else an
    integer-valued ``layers['counts']`` when the file has one. ``max_cells``: at most that many control cells, a
    draw seeded by ``seed`` (:func:`cap_rows`). Only the control cells' rows are read from the file
    (:func:`~sciml.perturbation.data.anndata_io.read_h5ad_rows`), and densified.
    """
    source = str(path)

    def control_rows(obs) -> np.ndarray | None:
        if require_key and condition_key not in obs.columns:
            raise DataError(f"{source}: obs has no column {condition_key!r} (columns: {list(obs.columns)[:8]}); "
                            "name the column of condition labels, or leave --condition-key out for a file of "
                            "control cells only")
        if condition_key not in obs.columns:
            return None
        mask = obs[condition_key].astype(str).isin([control_label, "ctrl"]).to_numpy()
        if not mask.any():
            raise DataError(f"{source}: no control cells labelled {control_label!r} in obs[{condition_key!r}]; "
                            f"pass the control label, or a file of control cells only without that column")
        return np.flatnonzero(mask)

    adata = read_h5ad_rows(path, control_rows)  # only the control cells' rows are read from disk
    var_names = [str(g) for g in adata.var_names]
    # with reorder, check presence only (the file's own order of the model genes is accepted)
    wanted = [g for g in var_names if g in set(genes)] if reorder and set(genes) <= set(var_names) else genes
    check_gene_order(var_names, wanted, source)
    adata = adata[:, list(genes)]
    keep = cap_rows(np.arange(adata.n_obs), max_cells, seed)
    if len(keep) < adata.n_obs:
        adata = adata[keep]
    x = dense(log_expression(adata, source, counts_layer, target_sum))
    layer = counts_layer or ("counts" if "counts" in adata.layers else None)
    counts = None if layer is None else dense(adata.layers[layer])
    if counts is not None and counts_layer is None and not (np.isfinite(counts).all() and (counts >= 0).all()
                                                            and np.array_equal(counts, np.round(counts))):
        counts, layer = None, None  # a 'counts' layer that holds no counts is not used
    return ControlCells(x=x, counts=None if counts is None else np.round(counts).astype(np.int64),
                        counts_layer=layer)
