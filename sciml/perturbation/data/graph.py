"""Gene–gene graphs for perturbation models: co-expression kNN (scDFM) or a user-given edge list."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

MAX_KNN_CELLS = 50_000  # cells the co-expression correlation is computed on (a seeded draw beyond)
CHUNK_VALUES = 2**25  # cells x genes densified at a time (float64: 256 MiB)
RANK_VALUES = 2**22  # gene-pair correlations ranked at a time (float64: 32 MiB)


def coexpression_knn(x, k: int = 30, max_cells: int = MAX_KNN_CELLS, seed: int = 0) -> torch.Tensor:
    """Symmetrised kNN graph on absolute Pearson correlation between genes.

    Parameters
    ----------
    x : (cells, genes) array or scipy sparse matrix
        Training expression (log1p). Read in chunks of rows (:data:`CHUNK_VALUES` values densified at a time).
    k : int
        Neighbours per gene (self excluded), clipped to ``genes - 1``.
    max_cells : int
        Beyond this many cells the correlation is computed on that many, drawn without replacement; below, on all.
    seed : int
        Seed of that draw.

    Returns
    -------
    torch.LongTensor (2, E)
        Directed edges ``(source, target)``, both directions present, no self loops, sorted, unique.

    """
    from sciml.perturbation.data.anndata_io import dense_rows, n_rows

    n_cells, n_genes = n_rows(x), x.shape[1]
    k = int(min(k, n_genes - 1))
    if k <= 0:
        return torch.zeros((2, 0), dtype=torch.long)
    rows = np.arange(n_cells)
    if n_cells > max_cells:
        rows = np.sort(np.random.default_rng(seed).choice(n_cells, max_cells, replace=False))
    step = max(1, CHUNK_VALUES // max(n_genes, 1))
    chunks = [rows[i:i + step] for i in range(0, len(rows), step)]
    mean = sum(dense_rows(x, c).astype(np.float64).sum(0) for c in chunks) / len(rows)
    gram, squares = np.zeros((n_genes, n_genes)), np.zeros(n_genes)
    for c in chunks:
        centred = dense_rows(x, c).astype(np.float64) - mean
        gram += centred.T @ centred
        squares += (centred * centred).sum(0)
    norm = np.sqrt(squares)
    norm[norm == 0] = np.inf  # constant genes correlate with nothing
    nbrs = np.empty((n_genes, k), dtype=np.int64)
    block = max(1, RANK_VALUES // n_genes)  # genes whose correlation rows are ranked at once (not a second G x G)
    for i in range(0, n_genes, block):
        corr = np.abs(gram[i:i + block] / np.outer(norm[i:i + block], norm))
        corr[np.arange(len(corr)), np.arange(i, i + len(corr))] = -1.0
        nbrs[i:i + block] = np.argsort(-corr, axis=1, kind="stable")[:, :k]
    src = np.repeat(np.arange(n_genes), k)
    dst = nbrs.reshape(-1)
    return _unique_edges(np.concatenate([src, dst]), np.concatenate([dst, src]))


def _unique_edges(src: np.ndarray, dst: np.ndarray) -> torch.Tensor:
    keep = src != dst
    pairs = np.unique(np.stack([src[keep], dst[keep]], axis=1), axis=0)
    return torch.as_tensor(pairs.T.copy(), dtype=torch.long).reshape(2, -1)


def read_edge_list(path: str | Path, genes: Sequence[str], symmetric: bool = True) -> torch.Tensor:
    """Edges between genes of ``genes`` from a two-column text file (``source target``, comma/tab/space separated).

    Edges naming genes outside ``genes`` are skipped; a file with no usable edge raises ``ValueError``.
    Lines starting with ``#`` and a ``source,target`` header are ignored.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data.gene_graph: no such file {path}; give a two-column edge list or null for kNN")
    index = {g: i for i, g in enumerate(genes)}
    src, dst = [], []
    for line in path.read_text().splitlines():
        parts = line.replace(",", " ").replace("\t", " ").split()
        if len(parts) < 2 or line.startswith("#") or parts[:2] == ["source", "target"]:
            continue
        if parts[0] in index and parts[1] in index:
            src.append(index[parts[0]])
            dst.append(index[parts[1]])
    if not src:
        raise ValueError(f"{path}: no edge joins two genes of the vocabulary; check the gene symbols")
    src, dst = np.asarray(src), np.asarray(dst)
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return _unique_edges(src, dst)
