"""Read crystal structures from files or objects and check that a crystal model can use them.

One reader for every atomistic model: :func:`read_structure` turns a pymatgen ``Structure``, an ASE
``Atoms`` or a file (CIF, POSCAR/CONTCAR/``.vasp``, extxyz, pymatgen JSON) into a checked pymatgen
``Structure``; anything it cannot use raises :class:`StructureError`, whose message is one line naming the
source. Lengths are in Å.

Readers never guess silently. The third-party readers' warnings are recorded while a file is parsed, and a
warning that means part of the structure was guessed (:data:`GUESSES`: a POSCAR without a species line read as
invented H, He, Li... atoms; a CIF element guessed from an atom label; a CIF whose space group could not be read,
so that only the listed sites form the cell) becomes a :class:`StructureError` naming the file and the fix.
Other reader warnings (rounded coordinates, ...) stay silent.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pymatgen.core import DummySpecies, IStructure, Structure

MIN_VOLUME = 1e-3  # Å^3; a cell with a smaller |det L| is degenerate
MIN_VOLUME_PER_ATOM = 1.0  # Å^3; the densest solids hold ~5 Å^3 per atom, so less means a broken cell
MAX_LATTICE_LENGTH = 1000.0  # Å; slabs and molecules in a box use tens of Å, so more means a unit mistake
COMPRESSED = (".gz", ".bz2", ".xz", ".lzma")
SUPPORTED = "CIF (.cif), POSCAR/CONTCAR or .vasp/.poscar, extxyz (.xyz/.extxyz), pymatgen JSON (.json)"


#: reader warnings that mean part of a structure was guessed: (pattern, reason, fix); ``{0}``, ``{1}`` in the
#: reason are the pattern's groups
GUESSES = (
    (re.compile(r"Elements in POSCAR cannot be determined"),
     "POSCAR has no species line: the reader would invent the elements (H, He, Li, ... by position)",
     "add the element symbols as line 6, above the atom counts (VASP 5 layout)"),
    (re.compile(r"^(\S+) parsed as (\S*)$"),
     "CIF atom label {0!r} would be read as element {1!r}, a guess from the label",
     "add an _atom_site_type_symbol column with the element symbols"),
)
#: a CIF key naming the space group; with pymatgen's "Defaulting to P1" it means the group could not be read
SPACE_GROUP_KEY = re.compile(r"^\s*_(?:symmetry_space_group_name_H-M|space_group_name_H-M_alt"
                             r"|symmetry_Int_Tables_number|space_group_IT_number)\s+(.+?)\s*$", flags=re.M | re.I)
P1 = {"p1", "1"}


class StructureError(ValueError):
    """A structure that cannot be read or used; ``str()`` is one line: ``"{source}: {reason} (fix: ...)"``.

    Parameters
    ----------
    source : str
        File, CSV row or ``"<input i>"`` the structure came from.
    reason : str
        What is wrong, in one line.
    fix : str, optional
        What the user can do about it.

    """

    def __init__(self, source: str, reason: str, fix: str = "") -> None:
        self.source, self.reason, self.fix = str(source), _one_line(reason), _one_line(fix)
        super().__init__(self.source, self.reason, self.fix)

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}" + (f" (fix: {self.fix})" if self.fix else "")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def refuse_guesses(caught: list, source: str, text: str = "") -> None:
    """Raise :class:`StructureError` when a recorded reader warning means the reader guessed (:data:`GUESSES`).

    Parameters
    ----------
    caught : list of warnings.WarningMessage
        Warnings recorded while the file was parsed.
    source : str
        File (or row) the structure came from.
    text : str
        The file's text: pymatgen's "Defaulting to P1" is a guess only when the CIF names another space group.

    """
    messages = [str(w.message) for w in caught]
    for message in messages:
        for pattern, reason, fix in GUESSES:
            if found := pattern.search(message):
                raise StructureError(source, reason.format(*found.groups()), fix)
    if any("Defaulting to P1" in m for m in messages):
        named = [g.strip("'\"") for g in SPACE_GROUP_KEY.findall(text)]
        other = [g for g in named if g.replace(" ", "").lower() not in P1]
        if other:
            raise StructureError(source, f"CIF names space group {other[0]!r} but the reader cannot expand it "
                                 "(only the listed sites would form the cell)",
                                 "give the symmetry operations (_symmetry_equiv_pos_as_xyz) or write the full cell "
                                 "in P 1")


@contextlib.contextmanager
def _reader(source: str, what: str, fix: str = "", text: str = "") -> Iterator[None]:
    """Turn what a third-party reader raises into one :class:`StructureError` ``"{what}: {Type}: {message}"``.

    Reader warnings are recorded inside and checked by :func:`refuse_guesses` (``text``: the file's text); the
    others stay silent: the error, not the warning, tells the user.
    """
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    except StructureError:
        raise
    except Exception as err:  # pymatgen and ASE raise many types on malformed input
        raise StructureError(source, f"{what}: {type(err).__name__}: {err}"[:200], fix) from err
    refuse_guesses(caught, source, text)


def parse_cif_string(text: str, source: str) -> Structure:
    """Parse CIF text holding exactly one structure (not checked; see :func:`check_structure`).

    The cell is kept as written (``primitive=False``); pymatgen's parser warnings are recorded: a guess is an
    error (:func:`refuse_guesses`), the relevant one is quoted in the error when nothing could be parsed, and the
    others stay silent.
    """
    from pymatgen.io.cif import CifParser

    if not isinstance(text, str) or not text.strip():
        raise StructureError(source, "empty CIF text")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            structures = CifParser.from_str(text).parse_structures(primitive=False)
        except Exception as err:  # pymatgen raises many types on malformed input
            notes = [str(w.message) for w in caught if "No structure parsed" in str(w.message)]
            detail = f" ({_one_line(notes[0])[:160]})" if notes else ""
            reason = f"not a valid CIF: no structure could be parsed{detail}"
            fix = "check the file is a CIF with cell and _atom_site data"
            raise StructureError(source, reason, fix) from err
    refuse_guesses(caught, source, text)
    if len(structures) != 1:
        reason = f"CIF holds {len(structures)} structures, expected one"
        raise StructureError(source, reason, "split the file")
    return structures[0]


def check_structure(
    structure: Structure,
    source: str,
    min_distance: float = 0.5,
    allowed_elements: set[str] | None = None,
) -> Structure:
    """Raise :class:`StructureError` unless ``structure`` is usable by a crystal model; return it.

    Checks, in order: at least one site; an ordered structure of real elements (no partial occupancy, no
    dummy species); elements in ``allowed_elements`` when given; finite lattice and coordinates; a cell with
    ``|det L| >= MIN_VOLUME`` (1e-3 Å^3), at least ``MIN_VOLUME_PER_ATOM`` (1 Å^3) per atom and no lattice
    vector longer than ``MAX_LATTICE_LENGTH`` (1000 Å; larger cells are unit mistakes); no two
    sites (or a site and its own periodic image) closer than ``min_distance`` Å.
    """
    n = len(structure)
    if n == 0:
        raise StructureError(source, "structure has no atoms")
    if not structure.is_ordered:
        raise StructureError(
            source,
            "disordered structure (partial occupancy)",
            "order the structure first, e.g. pymatgen OrderDisorderedStructureTransformation",
        )
    dummies = sorted({str(sp) for sp in structure.species if isinstance(sp, DummySpecies)})
    if dummies:
        raise StructureError(source, f"not a chemical element: {', '.join(dummies)}", "use element symbols")
    symbols = {sp.symbol for sp in structure.species}
    if allowed_elements is not None and not symbols <= set(allowed_elements):
        unseen = ", ".join(sorted(symbols - set(allowed_elements)))
        trained = " ".join(sorted(allowed_elements))
        raise StructureError(
            source, f"element(s) unknown to the model: {unseen}", f"the model was trained on: {trained}"
        )
    matrix = structure.lattice.matrix
    if not (np.isfinite(matrix).all() and np.isfinite(structure.frac_coords).all()):
        raise StructureError(source, "lattice or coordinates are not finite (NaN or inf)")
    volume = abs(float(np.linalg.det(matrix)))
    if volume < MIN_VOLUME:
        raise StructureError(
            source, f"degenerate cell: volume {volume:.3g} Å^3", "give three independent lattice vectors"
        )
    if volume / n < MIN_VOLUME_PER_ATOM:
        reason = f"cell too small: {volume / n:.3g} Å^3 per atom (< {MIN_VOLUME_PER_ATOM})"
        raise StructureError(source, reason, "check the lattice units are Å")
    longest = float(max(structure.lattice.abc))
    if longest > MAX_LATTICE_LENGTH:
        reason = f"cell too large: lattice vector of {longest:.3g} Å (> {MAX_LATTICE_LENGTH:g} Å)"
        raise StructureError(source, reason, "check the scale factor and that lengths are in Å")
    _check_overlaps(structure, source, min_distance)
    return structure


def _check_overlaps(structure: Structure, source: str, min_distance: float) -> None:
    centre, neighbour, _, dist = structure.get_neighbor_list(min_distance)
    close = dist < min_distance
    if not close.any():
        return
    k = int(np.argmin(np.where(close, dist, np.inf)))
    i, j, d = int(centre[k]), int(neighbour[k]), float(dist[k])
    si, sj = structure[i].specie.symbol, structure[j].specie.symbol
    pair = f"site {i} ({si}) and its own periodic image" if i == j else f"sites {i} ({si}) and {j} ({sj})"
    raise StructureError(
        source,
        f"overlapping atoms: {pair} are {d:.3f} Å apart (< {min_distance} Å)",
        "remove duplicate sites or fix the coordinates",
    )


def read_structure(
    obj: Any,
    source: str | None = None,
    *,
    min_distance: float = 0.5,
    allowed_elements: set[str] | None = None,
) -> Structure:
    """Read ``obj`` (``Structure``, ASE ``Atoms`` or a path) into a checked pymatgen ``Structure``.

    Parameters
    ----------
    obj : Structure | ase.Atoms | str | pathlib.Path
        In-memory structure or a file; the format follows the name: ``.cif``; ``POSCAR``/``CONTCAR`` in the
        name or ``.vasp``/``.poscar``; ``.xyz``/``.extxyz`` (one frame, with a ``Lattice``); ``.json``
        (``Structure.as_dict``). Other names are tried with pymatgen, then ASE. ``.gz``/``.bz2``/``.xz``
        compression is accepted.
    source : str, optional
        Name used in error messages; defaults to the path, or ``"<structure>"``.
    min_distance, allowed_elements
        Passed to :func:`check_structure`.

    Raises
    ------
    StructureError
        For anything unreadable or unusable, never a pymatgen/ASE exception.

    """
    from ase import Atoms

    if isinstance(obj, IStructure):
        source = source or "<structure>"
        structure = obj if isinstance(obj, Structure) else Structure.from_sites(obj)
    elif isinstance(obj, Atoms):
        source = source or "<atoms>"
        structure = _from_atoms(obj, source)
    elif isinstance(obj, str | Path):
        source = source or str(obj)
        structure = _read_file(Path(obj), source)
    else:
        raise StructureError(
            source or "<input>",
            f"cannot read a {type(obj).__name__}",
            "pass a pymatgen Structure, an ASE Atoms or a file path",
        )
    return check_structure(structure, source, min_distance, allowed_elements)


def _from_atoms(atoms: Any, source: str) -> Structure:
    from pymatgen.io.ase import AseAtomsAdaptor

    cell = np.asarray(atoms.cell.array, dtype=float)
    if not any(atoms.pbc) or abs(np.linalg.det(cell)) < MIN_VOLUME:
        raise StructureError(
            source,
            "no periodic cell: crystal models need a lattice",
            'set a cell and pbc (extxyz: a Lattice="..." key in the comment line)',
        )
    try:
        return AseAtomsAdaptor.get_structure(atoms)
    except Exception as err:
        raise StructureError(source, f"cannot convert ASE Atoms: {err}") from err


def _read_text(path: Path, source: str) -> str:
    from monty.io import zopen

    with zopen(path, "rb") as handle:
        raw = handle.read()
    if not raw.strip():
        raise StructureError(source, "empty file")
    if b"\x00" in raw[:4096]:
        raise StructureError(source, "binary content, not a text structure file", f"supported: {SUPPORTED}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise StructureError(
            source, "binary content, not a text structure file", f"supported: {SUPPORTED}"
        ) from err


def _read_file(path: Path, source: str) -> Structure:
    if not path.exists():
        raise StructureError(source, "no such file")
    if path.is_dir():
        raise StructureError(source, "is a directory", "pass its files, or use sciml.data.iter_structures")
    text = _read_text(path, source)
    name = path.name[: -len(path.suffix)] if path.suffix.lower() in COMPRESSED else path.name
    suffix = Path(name).suffix.lower()
    with _reader(source, "cannot read"):  # a reader failed in a way not caught below: still one line
        if suffix == ".cif":
            return parse_cif_string(text, source)
        if "POSCAR" in name.upper() or "CONTCAR" in name.upper() or suffix in (".vasp", ".poscar"):
            return _parse_poscar(text, source)
        if suffix in (".xyz", ".extxyz"):
            return _read_extxyz(path, source)
        if suffix == ".json":
            return _parse_json(text, source)
        return _read_unknown(path, source)


def _parse_poscar(text: str, source: str) -> Structure:
    from pymatgen.io.vasp import Poscar

    with _reader(source, "not a valid POSCAR", "check the VASP 5 layout: comment, scale, lattice, symbols, counts"):
        structure = Poscar.from_str(text).structure
    return structure


def _read_extxyz(path: Path, source: str) -> Structure:
    import ase.io

    with _reader(source, "not a valid extxyz file"):
        frames = ase.io.read(path, index=":", format="extxyz")
    if len(frames) != 1:
        raise StructureError(
            source,
            f"file holds {len(frames)} frames, expected one",
            "split it, or pass ase.io.read(path, ':') frames to iter_structures",
        )
    return _from_atoms(frames[0], source)


def _parse_json(text: str, source: str) -> Structure:
    with _reader(source, "not a pymatgen Structure JSON", "write it with json.dump(structure.as_dict(), f)"):
        structure = Structure.from_dict(json.loads(text))
    return structure


def _read_unknown(path: Path, source: str) -> Structure:
    import ase.io

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            structure = Structure.from_file(path)
        except Exception:  # not pymatgen's: try ASE's readers next
            structure = None
        if structure is None:
            try:
                atoms = ase.io.read(path)
            except Exception as err:
                fix = f"supported: {SUPPORTED}"
                raise StructureError(source, "not a recognised structure file", fix) from err
    refuse_guesses(caught, source)
    return structure if structure is not None else _from_atoms(atoms, source)
