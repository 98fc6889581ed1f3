"""Read, validate and write AnnData for perturbation data (docs/design.md §3).

Expression inside the package is ``log1p(counts / library_size · target_sum)`` (float32, cells × genes).
Input is either already log1p-normalised in ``X`` (default) or raw counts in a named layer
(``counts_layer='counts'``), normalised here with a frozen ``target_sum``. Sparse input stays sparse (scipy CSR,
float32): it is densified a condition or a batch at a time (:func:`dense_rows`), never whole. Every
user-triggerable problem raises :class:`DataError` with one line naming the file, the field and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_path

TARGET_SUM = 1e4  # library size after normalisation (counts per 10k)


class DataError(ValueError):
    """Bad perturbation input (one line: file, field, fix)."""


def read_h5ad(path: str | Path):
    """Read an ``.h5ad`` file; raise :class:`DataError` when it is missing or unreadable."""
    import anndata as ad

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file (give the path of an .h5ad AnnData file)")
    try:
        return ad.read_h5ad(path)
    except Exception as err:  # h5py/anndata raise many types for corrupted files
        raise DataError(f"{path}: not a readable .h5ad file ({err.__class__.__name__}); "
                        f"write it with anndata.AnnData.write_h5ad") from err


def read_h5ad_rows(path: str | Path, select=None, layers: Sequence[str] | None = None, x: bool = True):
    """The cells ``select(obs)`` of an ``.h5ad`` file, only the parts asked for, read from disk part by part.

    ``select`` maps the file's ``obs`` (DataFrame) to sorted row indices, or ``None`` for every cell; without
    ``select`` every cell is read. Only ``obs``, ``var``, ``X`` (``x=False``: not read, ``X`` is ``None``) and the
    ``layers`` named (``None``: all; a name the file lacks is a :class:`DataError`) are read, and of them only the
    selected rows: a 100,000-cell screen read for its log1p ``X`` does not hold its counts layer in memory as well.
    Errors as :func:`read_h5ad`.
    """
    import anndata as ad
    import h5py
    from anndata.io import read_elem, sparse_dataset

    path = Path(path)
    if not path.is_file():
        return read_h5ad(path)  # raises its one-line error naming the missing file
    try:
        with h5py.File(path, "r") as f:
            obs, var = read_elem(f["obs"]), read_elem(f["var"])
            rows = None if select is None else select(obs)

            def part(elem):
                if rows is None:
                    return read_elem(elem)
                return sparse_dataset(elem)[rows] if isinstance(elem, h5py.Group) else elem[rows]

            stored = list(f.get("layers", {}))
            missing = [n for n in layers or [] if n not in stored]
            if missing:
                raise DataError(f"{path}: layers has no {missing[0]!r} (layers: {stored}); set data.counts_layer to "
                                "null for log1p input in X")
            names = [n for n in stored if layers is None or n in layers]
            return ad.AnnData(X=part(f["X"]) if x and "X" in f else None,
                              obs=obs if rows is None else obs.iloc[rows], var=var,
                              layers={name: part(f["layers"][name]) for name in names})
    except (DataError, KeyboardInterrupt):
        raise
    except Exception as err:  # h5py/anndata raise many types for corrupted files
        raise DataError(f"{path}: not a readable .h5ad file ({err.__class__.__name__}); "
                        f"write it with anndata.AnnData.write_h5ad") from err


def write_h5ad(adata, path: str | Path) -> Path:
    """Write ``adata`` to ``path`` atomically (:func:`~sciml.core.io.atomic.atomic_path`: written once, renamed)."""
    with atomic_path(path) as tmp:
        adata.write_h5ad(tmp)
    return Path(path)


def dense(matrix) -> np.ndarray:
    """A dense, C-ordered float32 copy of a (possibly sparse) matrix (row order: sums over cells round the same)."""
    matrix = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)
    return np.ascontiguousarray(matrix, dtype=np.float32)


def is_sparse(matrix) -> bool:
    """True for a scipy sparse matrix or array (an AnnData backed or in-memory sparse ``X`` or layer)."""
    from scipy import sparse

    return sparse.issparse(matrix)


def dense_rows(matrix, rows) -> np.ndarray:
    """Rows ``rows`` (indices or a mask) of a dense or sparse matrix, dense float32 ``(len(rows), genes)``."""
    return dense(matrix[rows])


def n_rows(matrix) -> int:
    """Number of rows of a dense or sparse matrix (``len`` is ambiguous for scipy sparse)."""
    return int(matrix.shape[0])


def take_columns(matrix, cols):
    """Columns ``cols`` of a dense (contiguous copy) or sparse (CSR) matrix."""
    if is_sparse(matrix):
        return matrix[:, cols].tocsr()
    return np.ascontiguousarray(matrix[:, cols])


def _as_csr(matrix, copy: bool = True):
    """A float32 CSR copy of a sparse matrix (explicit zeros dropped, indices sorted).

    ``copy=False``: in place when ``matrix`` is float32 CSR already (for a matrix the caller owns).
    """
    from scipy import sparse

    out = sparse.csr_matrix(matrix, dtype=np.float32, copy=copy)
    out.eliminate_zeros()
    out.sort_indices()
    return out


def check_finite(values, source: str, field: str) -> None:
    """Raise :class:`DataError` if ``values`` (dense, or sparse CSR) holds NaN or inf."""
    if is_sparse(values):
        bad_data = ~np.isfinite(values.data)
        if bad_data.any():
            rows = np.unique(np.repeat(np.arange(values.shape[0]), np.diff(values.indptr))[bad_data])
            raise DataError(f"{source}: {field} holds {int(bad_data.sum())} NaN/inf values in {len(rows)} cells "
                            f"(first cell index {int(rows[0])}); remove or impute them")
        return
    bad = ~np.isfinite(values)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise DataError(f"{source}: {field} holds {int(bad.sum())} NaN/inf values in {len(rows)} cells "
                        f"(first cell index {int(rows[0])}); remove or impute them")


def check_conditions(obs, source: str, condition_key: str, control_label: str) -> None:
    """Check that ``obs[condition_key]`` exists and holds control cells labelled ``control_label``."""
    if condition_key not in obs.columns:
        hint = [c for c in ("condition", "perturbation") if c in obs.columns]
        raise DataError(f"{source}: obs has no column {condition_key!r} (columns: {list(obs.columns)[:8]}); "
                        f"set data.condition_key{' to ' + repr(hint[0]) if hint else ''}")
    labels = obs[condition_key].astype(str)
    if labels.isin(["nan", ""]).any():
        raise DataError(f"{source}: obs[{condition_key!r}] has empty/NaN labels; label every cell")
    if not (labels == control_label).any():
        common = labels.value_counts().index[:5].tolist()
        raise DataError(f"{source}: no control cells labelled {control_label!r} in obs[{condition_key!r}] "
                        f"(most common labels: {common}); set data.control_label to the control label")


def check_gene_order(var_names: Sequence[str], genes: Sequence[str], source: str) -> None:
    """Raise :class:`DataError` unless ``var_names`` contains ``genes`` in the same order (extra genes allowed)."""
    var_names = [str(g) for g in var_names]
    missing = sorted(set(genes) - set(var_names))
    if missing:
        raise DataError(f"{source}: var_names lack {len(missing)} of the model's genes "
                        f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); "
                        f"give data measured on the model's gene vocabulary")
    position = {g: i for i, g in enumerate(var_names)}
    order = [position[g] for g in genes]
    if order != sorted(order):
        raise DataError(f"{source}: var_names hold the model's genes in a different order; "
                        f"reorder with adata = adata[:, genes] (genes from the model metadata)")


def log_normalise(counts, target_sum: float = TARGET_SUM, copy: bool = True):
    """``log1p(c / Σc · target_sum)`` per cell, float32 ``(cells, genes)`` (Σ over the row; an all-zero row stays 0).

    The one library-size normalisation of the package: count layers at read time and the simulator's
    counts and noise-free levels (:mod:`sciml.perturbation.sim.simulate`). Sparse ``counts`` (2-D) give a float32
    CSR matrix with the same non-zeros (``copy=False``: computed in the caller's float32 CSR ``counts``).
    """
    if is_sparse(counts):
        out = _as_csr(counts, copy=copy)
        lib = np.maximum(np.asarray(out.sum(axis=1), dtype=np.float32).ravel(), 1e-12)
        scale = np.repeat(np.float32(target_sum) / lib, np.diff(out.indptr))
        out.data = np.log1p(out.data * scale).astype(np.float32)
        return out
    lib = np.maximum(counts.sum(axis=-1, keepdims=True), 1e-12)
    return np.log1p(counts / lib * target_sum).astype(np.float32)


def log_expression(adata, source: str, counts_layer: str | None = None, target_sum: float = TARGET_SUM,
                   owned: bool = False):
    """Expression in log1p space, float32 (cells, genes): dense for dense input, CSR for sparse input.

    ``counts_layer`` named: ``log1p(c / Σc · target_sum)`` per cell (Σ over the file's genes).
    Otherwise ``X`` is taken to be log1p-normalised already; integer-valued ``X`` with large values is refused.
    A sparse matrix is never densified here. ``owned``: ``adata`` was read for this call and is dropped after it,
    so its sparse ``X`` or layer may be normalised in place instead of copied (a 100,000 × 5,000 screen's ``X``
    is over a gigabyte).
    """
    if counts_layer is not None:
        if counts_layer not in adata.layers:
            raise DataError(f"{source}: layers has no {counts_layer!r} (layers: {list(adata.layers)}); "
                            f"set data.counts_layer to null for log1p input in X")
        layer = adata.layers[counts_layer]
        counts = _as_csr(layer, copy=not owned) if is_sparse(layer) else dense(layer)
        check_finite(counts, source, f"layers[{counts_layer!r}]")
        if ((counts.data if is_sparse(counts) else counts) < 0).any():
            raise DataError(f"{source}: layers[{counts_layer!r}] has negative counts; give raw counts")
        return log_normalise(counts, target_sum, copy=False)  # counts is this call's own matrix by now
    x = _as_csr(adata.X, copy=not owned) if is_sparse(adata.X) else dense(adata.X)
    check_finite(x, source, "X")
    values = x.data if is_sparse(x) else x
    if (values < 0).any():
        raise DataError(f"{source}: X has negative values; give log1p-normalised expression (not scaled/centred)")
    head = dense_rows(x, slice(0, min(n_rows(x), 200)))
    if values.size and values.max() > 30 and np.allclose(head, np.round(head)):
        raise DataError(f"{source}: X looks like raw counts (integers up to {values.max():.0f}); "
                        f"put them in layers['counts'] and set data.counts_layer: counts")
    return x


def select_hvg(x: np.ndarray, var_names: Sequence[str], n_hvg: int | None,
               keep: Sequence[str] = ()) -> list[str]:
    """Highly variable genes (scanpy, Seurat flavour on log1p data) plus ``keep``, in the file's var order.

    Parameters
    ----------
    x : (cells, genes) float array
        Expression in log1p space.
    var_names : sequence of str
        Gene symbols of the columns of ``x``.
    n_hvg : int or None
        Number of HVGs; ``None`` or ``>= len(var_names)`` keeps every gene.
    keep : sequence of str
        Genes kept whatever their variability (the perturbed genes that were measured).

    """
    var_names = [str(g) for g in var_names]
    if n_hvg is None or n_hvg >= len(var_names):
        return var_names
    import anndata as ad
    import scanpy as sc

    tmp = ad.AnnData(x.astype(np.float32))
    tmp.var_names = var_names
    sc.pp.highly_variable_genes(tmp, n_top_genes=int(n_hvg), flavor="seurat")
    chosen = set(tmp.var_names[tmp.var["highly_variable"].to_numpy()]) | (set(keep) & set(var_names))
    return [g for g in var_names if g in chosen]
