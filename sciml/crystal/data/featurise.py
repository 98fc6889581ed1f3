"""Labelled structure tables → crystal graphs, in parallel processes, with an optional tensor-only cache.

A CSV of 30,000 CIFs takes minutes to parse and featurise on one core; :func:`labelled_graphs` spreads the rows
over ``workers`` processes (CSV rows stream in chunks, so memory stays bounded by the graphs themselves) and, with
``cache``, stores the graphs as plain tensors keyed by the data file's SHA-256, the graph settings and ``limit``
(not the target: every target of one file shares the cache).
The cache is read with ``torch.load(weights_only=True)``: it holds tensors, numbers and strings only, never
pickled objects.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
from collections.abc import Iterator
from contextlib import closing
from hashlib import sha256
from itertools import islice
from pathlib import Path

import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from sciml.core import keys
from sciml.core.io.atomic import atomic_open
from sciml.core.io.checksum import sha256_file
from sciml.core.structures import parse_cif_string, read_structure
from sciml.crystal.data.graphs import GraphSettings, structure_to_graph
from sciml.crystal.data.sources import is_table, labelled_rows, labels_file, read_labelled, structure_rows

log = logging.getLogger(__name__)

CACHE_VERSION = 1
FIELDS = (keys.ATOMIC_NUMBERS, keys.POS, keys.CELL, keys.EDGE_INDEX, keys.EDGE_SHIFT, keys.HKL, keys.N_REFL,
          keys.N_ATOMS)


def _featurise(row: tuple[str, str, dict]) -> dict:
    """One CSV row ``(source, cif text, graph settings)`` → graph fields as numpy arrays (runs in a worker).

    Numpy, not torch: torch tensors cross process boundaries through shared-memory file descriptors, which
    some sandboxes refuse and which cost more than pickling small arrays.
    """
    source, text, settings = row
    structure = read_structure(parse_cif_string(text, source), source)
    graph = structure_to_graph(structure, GraphSettings(**settings), source=source)
    return {f: graph[f].numpy() for f in FIELDS}


def _to_graph(fields: dict) -> Data:
    return Data(**{f: torch.from_numpy(v) for f, v in fields.items()})


def _table_graphs(path: Path, settings: GraphSettings, workers: int, limit: int | None) -> Iterator[Data]:
    """Graphs of a CSV's rows in file order, featurised in ``workers`` processes (1: in this process)."""
    rows = ((f"{path}:{ident}", text, settings.to_dict()) for ident, text in structure_rows(path))
    rows = islice(rows, limit) if limit else rows
    if workers <= 1:
        yield from (_to_graph(_featurise(row)) for row in rows)
        return
    ctx = mp.get_context("spawn")  # fork after torch threads start can deadlock
    with ctx.Pool(workers) as pool, closing(pool.imap(_featurise, rows, chunksize=32)) as results:
        yield from (_to_graph(fields) for fields in results)


def labelled_graphs(path: str | Path, target: str, settings: GraphSettings, workers: int = 1,
                    limit: int | None = None, cache: str | Path | None = None) -> tuple[list[str], list[Data]]:
    """Ids and graphs (with ``y``, shape ``(1,)``, the dataset unit) of a labelled set, in file order.

    The cache holds the graphs of a CSV without targets, so every target of one file shares it; the targets are
    read from the file each time.

    Parameters
    ----------
    path : str or Path
        A CSV (``.csv`` or ``.csv.gz``) with ``cif`` and ``target`` columns, or a folder with ``id_prop.csv``.
    target : str
        Target column.
    settings : GraphSettings
        Graph settings.
    workers : int
        Processes that parse and featurise CSV rows (1: in this process). Folders are read in this process.
    limit : int, optional
        Only the first ``limit`` rows.
    cache : str or Path, optional
        Folder for a tensor cache of the graphs (created if needed); reused when the data file, graph settings and
        ``limit`` are the same.

    Raises
    ------
    StructureError, ValueError
        From the readers: a bad row names its file and id.

    """
    path = Path(path)
    if not is_table(path):
        table = read_labelled(path, target)
        table = table.iloc[:limit] if limit else table
        graphs = []
        for row in table.itertuples():
            graphs.append(structure_to_graph(row.structure, settings, source=str(row.id)))
            graphs[-1].y = torch.tensor([float(row.y)], dtype=torch.float32)
        return [str(i) for i in table["id"]], graphs
    labels = list(islice(labelled_rows(path, target, text=False), limit))
    ids, y = [ident for ident, _, _ in labels], [value for _, _, value in labels]
    file = cache_file(path, settings, limit, cache) if cache else None
    if file is not None and file.is_file():
        log.info("graphs: reading the cache %s", file)
        cached_ids, graphs = unpack(torch.load(file, weights_only=True))
    else:
        stream = _table_graphs(path, settings, max(int(workers), 1), limit)
        cached_ids, graphs = ids, list(tqdm(stream, total=len(ids), desc="graphs", leave=False, mininterval=10))
        if file is not None:
            with atomic_open(file, "wb") as handle:
                torch.save(pack(cached_ids, graphs), handle)
            log.info("graphs: cached %d structures in %s", len(graphs), file)
    if list(cached_ids) != ids:
        raise ValueError(f"{path}: the graph cache does not match the file's rows; delete {file}")
    for graph, value in zip(graphs, y, strict=True):
        graph.y = torch.tensor([value], dtype=torch.float32)
    return ids, graphs


def cache_file(path: Path, settings: GraphSettings, limit: int | None, cache: str | Path) -> Path:
    """Cache file name: a hash of the data file's SHA-256, graph settings, limit and cache version."""
    key = json.dumps([sha256_file(labels_file(path)), settings.to_dict(), limit, CACHE_VERSION],
                     sort_keys=True)
    return Path(cache) / f"graphs-{sha256(key.encode()).hexdigest()[:20]}.pt"


def pack(ids: list[str], graphs: list[Data]) -> dict:
    """Graphs as concatenated tensors plus per-graph counts (what the cache stores)."""
    out = {"ids": list(ids), "version": CACHE_VERSION}
    for field in FIELDS:
        out[field] = torch.cat([g[field] for g in graphs], dim=-1 if field == keys.EDGE_INDEX else 0)
    out["n_edges"] = torch.tensor([g[keys.EDGE_INDEX].shape[1] for g in graphs])
    return out


def unpack(packed: dict) -> tuple[list[str], list[Data]]:
    """Inverse of :func:`pack`."""
    if packed.get("version") != CACHE_VERSION:
        raise ValueError(f"graph cache version {packed.get('version')} is not {CACHE_VERSION}: delete the cache file")
    counts = {keys.ATOMIC_NUMBERS: packed[keys.N_ATOMS], keys.POS: packed[keys.N_ATOMS],
              keys.CELL: torch.ones_like(packed[keys.N_ATOMS]), keys.EDGE_INDEX: packed["n_edges"],
              keys.EDGE_SHIFT: packed["n_edges"], keys.HKL: packed[keys.N_REFL],
              keys.N_REFL: torch.ones_like(packed[keys.N_REFL]), keys.N_ATOMS: torch.ones_like(packed[keys.N_ATOMS])}
    parts = {f: torch.split(packed[f], counts[f].tolist(), dim=-1 if f == keys.EDGE_INDEX else 0) for f in FIELDS}
    graphs = [Data(**{f: parts[f][k] for f in FIELDS}) for k in range(len(packed["ids"]))]
    return list(packed["ids"]), graphs
