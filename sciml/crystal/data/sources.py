"""Expand user inputs (files, folders, CSV tables, objects) into structures, lazily.

Two entry points: :func:`iter_structures` for prediction (errors are yielded, so a batch can report a bad
file and go on) and :func:`read_labelled` for training (any bad row raises: training data must be clean).

Folder layouts: a folder with ``id_prop.csv`` (CGCNN/ALIGNN: no header; first column a file name, or an id
that resolves to ``<id>.cif``; second column the target) or a plain folder of structure files. Tables: a
CSV with a ``cif`` column, one structure per row, named by ``material_id`` (or ``id``), else the row number.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pymatgen.core import IStructure, Structure

from sciml.core.structures import StructureError, parse_cif_string, read_structure

ID_PROP = "id_prop.csv"
CIF_COLUMN = "cif"
ID_COLUMNS = ("material_id", "id")
CSV_CHUNK = 1000  # rows read at a time, so large tables stream with bounded memory

Item = tuple[str, Structure | StructureError]


def iter_structures(
    inputs: Iterable[str | Path | Structure | Any] | str | Path | Structure,
    *,
    min_distance: float = 0.5,
    allowed_elements: set[str] | None = None,
) -> Iterator[Item]:
    """Yield ``(source, structure or StructureError)`` for every structure the inputs name, lazily.

    Parameters
    ----------
    inputs : iterable of str, Path, pymatgen Structure or ase.Atoms (or a single one)
        Files; folders (with ``id_prop.csv``: the files it lists, else every regular non-hidden file, sorted
        by name); CSV files with a ``cif`` column (one item per row, source ``"{csv}:{id}"``); in-memory
        structures (source ``"<input {i}>"``).
    min_distance, allowed_elements
        Passed to :func:`sciml.core.structures.check_structure`.

    Yields
    ------
    tuple[str, Structure | StructureError]
        A checked structure, or the error to report for that source (missing file, non-structure file...).

    """
    from ase import Atoms

    if isinstance(inputs, str | Path | IStructure | Atoms):
        inputs = [inputs]
    check = {"min_distance": min_distance, "allowed_elements": allowed_elements}
    for i, obj in enumerate(inputs):
        if isinstance(obj, IStructure | Atoms):
            yield _read(obj, f"<input {i}>", check)
        elif isinstance(obj, str | Path):
            yield from _expand_path(Path(obj), check)
        else:
            fix = "pass file or folder paths, pymatgen Structures or ASE Atoms"
            yield f"<input {i}>", StructureError(f"<input {i}>", f"cannot read a {type(obj).__name__}", fix)


def _read(obj: Any, source: str, check: dict[str, Any]) -> Item:
    try:
        return source, read_structure(obj, source, **check)
    except StructureError as err:
        return source, err


def _expand_path(path: Path, check: dict[str, Any]) -> Iterator[Item]:
    if path.is_dir() and (path / ID_PROP).is_file():
        for _, file, _ in _id_prop_rows(path):
            if file.is_file():
                yield _read(file, str(file), check)
            else:
                yield str(file), StructureError(str(file), f"listed in {ID_PROP} but not found")
    elif path.is_dir():
        for file in sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")):
            yield _read(file, str(file), check)
    elif is_table(path):
        try:
            header = _csv_header(path)
        except StructureError as err:
            yield str(path), err
            return
        for ident, text, _ in _csv_rows(path, header):
            yield _read_cif(text, f"{path}:{ident}", check)
    else:
        yield _read(path, str(path), check)


def _read_cif(text: str, source: str, check: dict[str, Any]) -> Item:
    try:
        return source, read_structure(parse_cif_string(text, source), source, **check)
    except StructureError as err:
        return source, err


def _id_prop_rows(folder: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """Yield ``(id as written, structure file, other columns)`` per non-empty ``id_prop.csv`` row."""
    with open(folder / ID_PROP, newline="") as handle:
        for row in csv.reader(handle):
            if not row or not row[0].strip():
                continue
            name = row[0].strip()
            file = folder / name
            if not file.is_file() and (folder / f"{name}.cif").is_file():
                file = folder / f"{name}.cif"
            yield name, file, row[1:]


def _csv_header(path: Path) -> list[str]:
    """Column names of a CSV that must have a ``cif`` column; :class:`StructureError` otherwise."""
    try:
        header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (ValueError, UnicodeDecodeError) as err:  # pandas' parser errors are ValueErrors
        raise StructureError(str(path), f"not a readable CSV: {type(err).__name__}: {err}"[:200]) from err
    if CIF_COLUMN not in header:
        raise StructureError(
            str(path),
            f"CSV has no '{CIF_COLUMN}' column (columns: {', '.join(header)})",
            f"add a '{CIF_COLUMN}' column, or pass the folder holding {ID_PROP}",
        )
    return header


def _csv_rows(path: Path, header: list[str], extra: tuple[str, ...] = (),
              text: bool = True) -> Iterator[tuple[str, str, list]]:
    """Stream ``(id, cif text, [extra column values])`` per CSV row, ``CSV_CHUNK`` rows at a time.

    ``text=False`` skips the ``cif`` column (the text is then ``""``).
    """
    id_column = next((c for c in ID_COLUMNS if c in header), None)
    usecols = list(dict.fromkeys([*([CIF_COLUMN] if text else []), *extra, *([id_column] if id_column else [])]))
    row = 0
    with pd.read_csv(path, usecols=usecols, chunksize=CSV_CHUNK, dtype=object) as reader:
        for chunk in reader:
            ids = chunk[id_column] if id_column else [None] * len(chunk)
            cifs = chunk[CIF_COLUMN] if text else [""] * len(chunk)
            for cif, ident, *rest in zip(cifs, ids, *(chunk[c] for c in extra), strict=True):
                yield _format_id(ident, row), cif if isinstance(cif, str) else "", rest
                row += 1


def _format_id(ident: Any, row: int) -> str:
    if ident is None or (isinstance(ident, float) and np.isnan(ident)):
        return str(row)
    if isinstance(ident, float) and ident.is_integer():
        return str(int(ident))
    return str(ident).strip()


def labels_file(path: str | Path) -> Path:
    """The file holding a labelled dataset's targets: the CSV itself, or a folder's ``id_prop.csv``.

    Its SHA-256 (:func:`sciml.core.io.checksum.sha256_file`) is the data hash stored in artifacts.
    """
    path = Path(path)
    return path / ID_PROP if path.is_dir() else path


def read_labelled(path: str | Path, target: str | None = None) -> pd.DataFrame:
    """Read a labelled training set into a table with columns ``id, structure, y``.

    Parameters
    ----------
    path : str or Path
        A CSV with a ``cif`` column and a ``target`` column, or a folder with ``id_prop.csv`` whose second
        column is the target (``target`` is then only a name and is not looked up).
    target : str, optional
        Target column of the CSV; required for CSV input.

    Returns
    -------
    pandas.DataFrame
        ``id`` (str: ``material_id``/``id`` column or row number; the first ``id_prop.csv`` column),
        ``structure`` (checked pymatgen ``Structure``), ``y`` (float, the dataset's unit).

    Raises
    ------
    StructureError
        When any structure cannot be read; the source names the file or ``"{csv}:{id}"`` row.
    ValueError
        When the target is missing or not a finite number.
    FileNotFoundError
        When ``path`` does not exist.

    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_dir() and (path / ID_PROP).is_file():
        rows = []
        for name, file, rest in _id_prop_rows(path):
            y = _target_value(rest[0] if rest else None, f"{path / ID_PROP}: row {name!r}")
            rows.append((name, read_structure(file, str(file)), y))
    elif is_table(path):
        rows = []
        stream = labelled_rows(path, target)
        with closing(stream):  # close the CSV even when a row raises
            for ident, text, y in stream:
                source = f"{path}:{ident}"
                rows.append((ident, read_structure(parse_cif_string(text, source), source), y))
    else:
        raise ValueError(
            f"{path}: expected a folder with {ID_PROP} or a .csv (or .csv.gz) file with a '{CIF_COLUMN}' column"
        )
    return pd.DataFrame(rows, columns=["id", "structure", "y"])


def is_table(path: Path) -> bool:
    """Whether ``path`` is a CSV file (``.csv``, or gzipped ``.csv.gz``)."""
    name = path.name.lower()
    return path.is_file() and (name.endswith(".csv") or name.endswith(".csv.gz"))


def labelled_rows(path: Path, target: str | None, text: bool = True) -> Iterator[tuple[str, str, float]]:
    """Stream ``(id, cif text, target value)`` per row of a labelled CSV; a missing or bad target raises.

    With ``text=False`` the CIF column is not read and the text is ``""`` (targets only, fast).
    """
    header = _csv_header(path)
    if target is None or target not in header:
        raise ValueError(f"{path}: target column {target!r} not found; columns: {', '.join(header)}")
    stream = _csv_rows(path, header, (target,), text=text)
    with closing(stream):
        for ident, cif, (value,) in stream:
            yield ident, cif, _target_value(value, f"{path}:{ident}: {target}")


def structure_rows(path: Path) -> Iterator[tuple[str, str]]:
    """Stream ``(id, cif text)`` per row of a CSV with a ``cif`` column."""
    stream = _csv_rows(path, _csv_header(path))
    with closing(stream):
        for ident, cif, _ in stream:
            yield ident, cif


def _target_value(value: Any, where: str) -> float:
    try:
        y = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: target {value!r} is not a number") from err
    if not np.isfinite(y):
        raise ValueError(f"{where}: target is {y}, not a finite number")
    return y
