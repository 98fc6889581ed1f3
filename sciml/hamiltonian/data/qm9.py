"""QM9 molecules (Ramakrishnan et al. 2014) from the CSV files inside the ``qm9pack`` wheel (MIT).

130,831 molecules of H, C, N, O, F with up to 9 heavy atoms, B3LYP/6-31G(2df,p) geometries in Å. A molecule is
named by its QM9 index (the number in ``dsgdb9nsd_000001.xyz``, 1-based; the 3,054 molecules QM9 marks as
inconsistent are absent, so the indices have gaps). The CSVs are read directly: ``qm9pack``'s own loader needs
``pkg_resources``, so the package is located without importing it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["QM9_ELEMENTS", "QM9Molecule", "parse_indices", "parse_shard", "qm9_molecules", "qm9_table",
           "select_indices", "shard_indices"]

#: the elements of QM9, in the order of its ``Stoichiometry`` column (atom counts of H, C, N, O, F)
QM9_ELEMENTS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}
_PARTS = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")


@dataclass(frozen=True)
class QM9Molecule:
    """One QM9 molecule: ``index`` (QM9's), ``smiles``, ``formula`` (Hill order), numbers (n,), positions (n, 3) Å."""

    index: int
    smiles: str
    formula: str
    numbers: tuple[int, ...]
    positions: tuple[tuple[float, float, float], ...]


def _data_folder() -> Path:
    import importlib.util

    from sciml.core.optional import MissingDependencyError

    spec = importlib.util.find_spec("qm9pack")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("needs qm9pack: pip install 'sciml[qm9]'", name="qm9pack")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    missing = [p for p in _PARTS if not (folder / p).is_file()]
    if missing:
        raise FileNotFoundError(f"qm9pack at {folder.parent} lacks {', '.join(missing)}; reinstall qm9pack")
    return folder


@lru_cache(maxsize=1)
def qm9_table():
    """Index of every QM9 molecule, sorted by QM9 index (four small columns of the CSVs, about a second).

    A DataFrame indexed by ``index`` (QM9's) with columns ``index``, ``part`` (CSV file), ``row`` (within it),
    ``smiles``, ``n_atoms``, ``n_heavy`` (non-hydrogen atoms).
    """
    import pandas as pd

    folder, frames = _data_folder(), []
    for part in _PARTS:
        df = pd.read_csv(folder / part, usecols=["Index", "SMILES", "N_atoms", "Stoichiometry"])
        n_h = df["Stoichiometry"].map(lambda s: json.loads(s)[0])
        frames.append(pd.DataFrame({"index": df["Index"].astype(np.int64), "part": part, "row": np.arange(len(df)),
                                    "smiles": df["SMILES"], "n_atoms": df["N_atoms"],
                                    "n_heavy": df["N_atoms"] - n_h}))
    return pd.concat(frames, ignore_index=True).sort_values("index").set_index("index", drop=False)


def parse_indices(spec: str) -> list[int]:
    """``"1,2,5-9"`` -> [1, 2, 5, 6, 7, 8, 9] (QM9 indices; ranges inclusive)."""
    out: list[int] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        try:
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError(f"--indices: cannot read {part!r}; give QM9 indices such as 1,2,5-9") from None
    if not out:
        raise ValueError("--indices is empty; give QM9 indices such as 1,2,5-9")
    return list(dict.fromkeys(out))


def select_indices(n: int | None = None, seed: int = 0, indices: list[int] | None = None,
                   max_heavy_atoms: int | None = None) -> list[int]:
    """QM9 indices to compute, ascending.

    ``indices`` as given (each must exist and pass ``max_heavy_atoms``), or ``n`` drawn without replacement by
    ``default_rng(seed)`` from the molecules with at most ``max_heavy_atoms`` heavy atoms (all when ``n`` is None).
    """
    table = qm9_table()
    ok = table["n_heavy"] <= max_heavy_atoms if max_heavy_atoms is not None else table["n_heavy"] >= 0
    if indices is not None:
        _check_known(table, indices)
        big = [i for i in indices if not ok[i]]
        if big:
            raise ValueError(f"QM9 index {big[0]} has {table['n_heavy'][big[0]]} heavy atoms, more than "
                             f"--max-heavy-atoms {max_heavy_atoms}")
        return sorted(indices)
    pool = table.index[ok].to_numpy()
    if n is None:
        return pool.tolist()
    if not 1 <= n <= len(pool):
        raise ValueError(f"--n {n}: QM9 has {len(pool)} molecules with at most {max_heavy_atoms} heavy atoms")
    return sorted(np.random.default_rng(seed).choice(pool, size=n, replace=False).tolist())


def parse_shard(spec: str) -> tuple[int, int]:
    """``"i/k"`` -> (i, k), shard i (0-based, as SLURM array ids from 0) of k."""
    try:
        i, k = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: expected i/k, e.g. 0/10 (shard i of k, i from 0 to k-1)") from None
    if k < 1 or not 0 <= i < k:
        raise ValueError(f"--shard {spec}: need k >= 1 and 0 <= i < k (shard i of k, i from 0 to k-1)")
    return i, k


def shard_indices(selected: list[int], i: int, k: int) -> list[int]:
    """Shard ``i`` of ``k``: every k-th molecule of the ascending selection, from position i.

    The k shards partition the selection and their sizes differ by at most one, small and large molecules alike.
    """
    return sorted(selected)[i::k]


def _check_known(table, indices: list[int]) -> None:
    """Refuse indices QM9 does not have (one line naming the first)."""
    unknown = [i for i in indices if i not in table.index]
    if unknown:
        raise ValueError(f"unknown QM9 index {unknown[0]} ({len(unknown)} unknown); QM9 indices run from "
                         f"{table.index.min()} to {table.index.max()} with gaps (inconsistent molecules removed)")


def qm9_molecules(indices: list[int]) -> list[QM9Molecule]:
    """Read the geometries of ``indices`` (QM9 indices) from the CSVs; only their rows are parsed."""
    import pandas as pd

    table, folder, out = qm9_table(), _data_folder(), {}
    _check_known(table, indices)
    rows = table.loc[list(indices)]
    for part, group in rows.groupby("part"):
        wanted = set((group["row"] + 1).tolist())  # +1: the header line
        df = pd.read_csv(folder / part, usecols=["Index", "Elements", "XYZ_Ang"],
                         skiprows=lambda r, w=wanted: r > 0 and r not in w)
        for idx, elements, xyz in zip(df["Index"], df["Elements"], df["XYZ_Ang"], strict=True):
            symbols = ast.literal_eval(elements)  # Python literals: ['C','H'] and floats written as 0. or 1.
            bad = sorted(set(symbols) - set(QM9_ELEMENTS))
            if bad:
                raise ValueError(f"QM9 index {idx} has element {bad[0]}, not one of {', '.join(QM9_ELEMENTS)}; "
                                 "reinstall qm9pack")
            numbers = tuple(QM9_ELEMENTS[s] for s in symbols)
            out[int(idx)] = QM9Molecule(int(idx), str(table["smiles"][idx]), _hill(symbols), numbers,
                                        tuple(tuple(map(float, p)) for p in ast.literal_eval(xyz)))
    return [out[i] for i in indices]


def _hill(symbols: list[str]) -> str:
    """Hill formula: C, then H, then the others alphabetically (CH4, H2O, C2H6O)."""
    counts = {s: symbols.count(s) for s in sorted(set(symbols))}
    order = (["C", "H"] if "C" in counts else []) + [s for s in counts if "C" not in counts or s not in "CH"]
    return "".join(f"{s}{counts[s] if counts[s] > 1 else ''}" for s in order if s in counts)
