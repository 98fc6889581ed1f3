"""Structure readers, checks and input expansion: every format, every failure as a one-line error."""

from __future__ import annotations

import itertools
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ase import Atoms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymatgen.core import Lattice, Structure

from sciml.core.structures import StructureError, check_structure, read_structure
from sciml.crystal.data.sources import iter_structures, read_labelled

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "structures"
SHARED = ROOT.parent / "shared" / "data"
FRAC = [[0, 0, 0], [0.5, 0.5, 0.5], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]


def perovskite(a: float = 3.905, species=("Sr", "Ti", "O", "O", "O")) -> Structure:
    """Build a cubic 5-atom perovskite."""
    return Structure(Lattice.cubic(a), list(species), FRAC)


def cif_text(structure: Structure) -> str:
    """Return the CIF of ``structure`` as pymatgen writes it."""
    return structure.to(fmt="cif")


def assert_one_line_naming(err: StructureError, name: str) -> None:
    """Check that the message is one line and names the source."""
    text = str(err)
    assert "\n" not in text and text.startswith(name), text


# ---- formats -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "formula"),
    [
        ("SrTiO3.cif", "SrTiO3"),
        ("BaZrO3.vasp", "BaZrO3"),
        ("KNbO3.extxyz", "KNbO3"),
        ("CaTiO3.json", "CaTiO3"),
        ("POSCAR_LaAlO3", "LaAlO3"),
        ("NaTaO3.xyz", "NaTaO3"),
    ],
)
def test_example_files_read(name, formula):
    """Each shipped example reads, as str or Path, with five atoms."""
    for path in (EXAMPLES / name, str(EXAMPLES / name)):
        s = read_structure(path)
        assert s.composition.reduced_formula == formula and len(s) == 5


@pytest.mark.parametrize("name", ["POSCAR", "CONTCAR", "x.poscar", "POSCAR-mp-1.vasp"])
def test_poscar_names(tmp_path, name):
    """POSCAR/CONTCAR in the name, or .vasp/.poscar, select the POSCAR reader."""
    (tmp_path / name).write_text(perovskite().to(fmt="poscar"))
    assert read_structure(tmp_path / name).composition.reduced_formula == "SrTiO3"


def test_in_memory_objects_and_compressed(tmp_path):
    """Structure and periodic ASE Atoms are accepted; a gzipped CIF reads too."""
    s = perovskite()
    assert read_structure(s) is s
    atoms = Atoms("SrTiO3", scaled_positions=FRAC, cell=np.eye(3) * 3.905, pbc=True)
    assert read_structure(atoms).composition.reduced_formula == "SrTiO3"
    import gzip

    with gzip.open(tmp_path / "a.cif.gz", "wt") as handle:
        handle.write(cif_text(s))
    assert len(read_structure(tmp_path / "a.cif.gz")) == 5


# ---- failures -----------------------------------------------------------------------------------------


def bad_files() -> dict[str, bytes]:
    """File name -> content of inputs that must each give a StructureError."""
    good = cif_text(perovskite())
    overlapping = perovskite()
    overlapping.append("O", [0.55, 0.5, 0.5])  # 0.2 Å from Ti
    return {
        "malformed.cif": good[: good.index("_atom_site_type_symbol")].encode(),
        "truncated.cif": good[:400].encode(),
        "empty.cif": b"",
        "garbage.cif": bytes(range(256)) * 4,
        "garbage.bin": b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(200),
        "unknown_element.cif": good.replace("  Sr  Sr0", "  Xx  Xx0").encode(),
        "overlap.cif": cif_text(overlapping).encode(),
        "no_lattice.xyz": b"2\nmolecule\nH 0 0 0\nH 0 0 0.74\n",
        "partial.cif": good.replace("0.00000000  0.00000000  0.00000000  1", "0.0  0.0  0.0  0.5").encode(),
        "bad.json": b'{"not": "a structure"}',
        "bad.vasp": b"title\n1.0\n1 0 0\n",
        "notes.txt": b"just some notes\n",
    }


REASONS = {
    "malformed.cif": "not a valid CIF",
    "truncated.cif": "not a valid CIF",
    "empty.cif": "empty file",
    "garbage.cif": "binary",
    "garbage.bin": "binary",
    "unknown_element.cif": "not a chemical element: Xx",
    "overlap.cif": "overlapping atoms: sites 1 (Ti) and 5 (O) are 0.195 Å apart",
    "no_lattice.xyz": "no periodic cell",
    "partial.cif": "disordered",
    "bad.json": "not a pymatgen Structure JSON",
    "bad.vasp": "not a valid POSCAR",
    "notes.txt": "not a recognised structure file",
}


@pytest.mark.parametrize("name", REASONS)
def test_bad_file_gives_one_line_error(tmp_path, name):
    """Each bad input raises StructureError (never a pymatgen/ASE exception) with a one-line reason."""
    path = tmp_path / name
    path.write_bytes(bad_files()[name])
    with pytest.raises(StructureError) as info:
        read_structure(path)
    assert_one_line_naming(info.value, str(path))
    assert REASONS[name] in info.value.reason


def _poscar_without_species() -> str:
    """The LaAlO3 example with its species line and the symbols after the coordinates removed."""
    lines = (EXAMPLES / "POSCAR_LaAlO3").read_text().splitlines()
    return "\n".join(" ".join(line.split()[:3]) if k > 7 else line for k, line in enumerate(lines) if k != 5) + "\n"


def _cif_lines() -> list[str]:
    return (EXAMPLES / "SrTiO3.cif").read_text().splitlines()


GUESSED = {  # file -> (content, fragment of the reason, fragment of the fix)
    "POSCAR_no_species": (_poscar_without_species(), "POSCAR has no species line", "element symbols as line 6"),
    "label_only.cif": ("\n".join(line.replace("  O  O2", "  Ow").replace("  Sr  Sr0", "  Sr0")
                                 .replace("  Ti  Ti1", "  Ti1").replace("  O  O3", "  O3").replace("  O  O4", "  O4")
                                 for line in _cif_lines() if "_atom_site_type_symbol" not in line),
                       "label 'Ow' would be read as element 'O'", "_atom_site_type_symbol"),
    "unknown_group.cif": ("\n".join(
        ["_symmetry_space_group_name_H-M   'P m -3 m x'" if line.startswith("_symmetry_space_group") else line
         for line in _cif_lines() if not line.startswith(("_symmetry_Int", " _symmetry_equiv", "  1  'x, y, z'",
                                                           "  O  O3", "  O  O4"))])
        .replace("loop_\nloop_", "loop_"), "space group 'P m -3 m x'", "symmetry operations"),
}


@pytest.mark.parametrize("name", GUESSED)
def test_guessed_structure_is_an_error_naming_the_file_and_the_fix(tmp_path, name):
    """A reader that would guess species or symmetry (and only warn) gives a StructureError instead."""
    content, reason, fix = GUESSED[name]
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(StructureError) as info:
        read_structure(path)
    assert_one_line_naming(info.value, str(path))
    assert reason in info.value.reason and fix in info.value.fix


def test_species_after_coordinates_and_unnamed_p1_are_not_guesses(tmp_path):
    """VASP 4 symbols after the coordinates name the species; a CIF without symmetry data is read as P 1."""
    lines = (EXAMPLES / "POSCAR_LaAlO3").read_text().splitlines()
    (tmp_path / "POSCAR").write_text("\n".join(line for k, line in enumerate(lines) if k != 5) + "\n")
    assert read_structure(tmp_path / "POSCAR").composition.reduced_formula == "LaAlO3"
    plain = "\n".join(line for line in _cif_lines() if not line.startswith(
        ("_symmetry_space_group", "_symmetry_Int", " _symmetry_equiv", "  1  'x, y, z'"))).replace("loop_\nloop_",
                                                                                                 "loop_")
    (tmp_path / "plain.cif").write_text(plain)
    assert read_structure(tmp_path / "plain.cif").composition.reduced_formula == "SrTiO3"


def test_nonexistent_path_and_directory(tmp_path):
    """A missing path and a directory are errors that name the path."""
    with pytest.raises(StructureError, match="no such file") as info:
        read_structure(tmp_path / "missing.cif")
    assert_one_line_naming(info.value, str(tmp_path / "missing.cif"))
    with pytest.raises(StructureError, match="directory"):
        read_structure(tmp_path)


def test_atoms_without_cell_and_unsupported_type():
    """Non-periodic Atoms and unknown objects are rejected."""
    with pytest.raises(StructureError, match="no periodic cell"):
        read_structure(Atoms("H2", positions=[[0, 0, 0], [0, 0, 0.74]]))
    with pytest.raises(StructureError, match="cannot read a int"):
        read_structure(3)


def test_multi_frame_extxyz_is_rejected(tmp_path):
    """An extxyz trajectory is not silently reduced to one frame."""
    import ase.io
    from pymatgen.io.ase import AseAtomsAdaptor

    atoms = AseAtomsAdaptor.get_atoms(perovskite())
    ase.io.write(tmp_path / "traj.extxyz", [atoms, atoms], format="extxyz")
    with pytest.raises(StructureError, match="2 frames"):
        read_structure(tmp_path / "traj.extxyz")


def test_allowed_elements_and_checks():
    """Unknown elements name themselves and the trained vocabulary; degenerate cells are rejected."""
    s = perovskite(species=("Sr", "Ti", "O", "O", "F"))
    with pytest.raises(StructureError) as info:
        check_structure(s, "x.cif", allowed_elements={"Sr", "Ti", "O"})
    assert "F" in info.value.reason and "O Sr Ti" in info.value.fix
    assert check_structure(s, "x.cif", allowed_elements={"Sr", "Ti", "O", "F"}) is s
    with pytest.raises(StructureError, match="own periodic image"):
        check_structure(Structure(Lattice.orthorhombic(0.4, 5, 5), ["H"], [[0, 0, 0]]), "tiny")
    flat = Structure(Lattice([[3, 0, 0], [0, 3, 0], [3, 3, 1e-6]]), ["Na"], [[0, 0, 0]])
    with pytest.raises(StructureError, match="degenerate cell"):
        check_structure(flat, "flat")
    with pytest.raises(StructureError, match="no atoms"):
        check_structure(Structure(Lattice.cubic(3), [], []), "empty")
    dense = Structure(Lattice.cubic(1.2), ["H", "H"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    with pytest.raises(StructureError, match="per atom"):
        check_structure(dense, "dense", min_distance=0.1)


def test_structure_error_format_and_pickle():
    """str() is one line with the optional fix; the error survives pickling (DataLoader workers)."""
    err = StructureError("a.cif", "bad\nthing", "do this")
    assert str(err) == "a.cif: bad thing (fix: do this)"
    assert str(StructureError("a.cif", "bad")) == "a.cif: bad"
    assert isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.fix == "do this"


# ---- expansion of inputs ------------------------------------------------------------------------------


def write_mixed_folder(folder: Path) -> None:
    """Three good files, two bad ones and a hidden file."""
    folder.mkdir()
    for name in ("SrTiO3.cif", "BaZrO3.vasp", "CaTiO3.json"):
        shutil.copy(EXAMPLES / name, folder / name)
    (folder / "README.txt").write_text("not a structure\n")
    (folder / "empty.cif").write_text("")
    (folder / ".hidden.cif").write_text("ignored")
    (folder / "sub").mkdir()


def test_folder_without_id_prop(tmp_path):
    """Every regular non-hidden file, sorted by name; bad files become error items."""
    write_mixed_folder(tmp_path / "in")
    items = list(iter_structures([tmp_path / "in"]))
    names = [Path(source).name for source, _ in items]
    assert names == ["BaZrO3.vasp", "CaTiO3.json", "README.txt", "SrTiO3.cif", "empty.cif"]
    ok = {Path(src).name for src, s in items if isinstance(s, Structure)}
    assert ok == {"BaZrO3.vasp", "CaTiO3.json", "SrTiO3.cif"}
    for source, item in items:
        if isinstance(item, StructureError):
            assert_one_line_naming(item, source)


def test_folder_with_id_prop(tmp_path):
    """CGCNN ids resolve to <id>.cif, ALIGNN rows name the file, missing files are error items."""
    folder = tmp_path / "data"
    write_mixed_folder(folder)
    (folder / "id_prop.csv").write_text("SrTiO3,1.5\nBaZrO3.vasp,2.5\nmissing,0.0\n")
    items = list(iter_structures(str(folder)))
    assert [Path(s).name for s, _ in items] == ["SrTiO3.cif", "BaZrO3.vasp", "missing"]
    assert isinstance(items[0][1], Structure) and isinstance(items[1][1], Structure)
    assert isinstance(items[2][1], StructureError) and "id_prop.csv" in str(items[2][1])
    (folder / "id_prop.csv").write_text("SrTiO3,1.5\nBaZrO3.vasp,2.5\n")
    table = read_labelled(folder)
    assert table.columns.tolist() == ["id", "structure", "y"]
    assert table["id"].tolist() == ["SrTiO3", "BaZrO3.vasp"] and table["y"].tolist() == [1.5, 2.5]


def test_csv_with_cif_column(tmp_path):
    """One item per row named "{csv}:{material_id}" (or the row number); bad rows are error items."""
    good, other = cif_text(perovskite()), cif_text(perovskite(4.2, ("Ba", "Zr", "O", "O", "O")))
    table = pd.DataFrame(
        {"material_id": ["mp-1", "mp-2", "mp-3"], "cif": [good, "garbage", other], "gap": [1.0, 2.0, 3.0]}
    )
    table.to_csv(tmp_path / "t.csv")
    items = list(iter_structures([tmp_path / "t.csv"]))
    assert [s for s, _ in items] == [f"{tmp_path / 't.csv'}:mp-{i}" for i in (1, 2, 3)]
    assert [type(x).__name__ for _, x in items] == ["Structure", "StructureError", "Structure"]
    table.drop(columns="material_id").to_csv(tmp_path / "noid.csv", index=False)
    assert [s.rsplit(":", 1)[1] for s, _ in iter_structures([tmp_path / "noid.csv"])] == ["0", "1", "2"]
    (tmp_path / "nocif.csv").write_text("a,b\n1,2\n")
    ((source, err),) = list(iter_structures([tmp_path / "nocif.csv"]))
    assert isinstance(err, StructureError) and "no 'cif' column" in str(err) and "a, b" in str(err)


def test_read_labelled_csv(tmp_path):
    """Target column required (error names file and columns); a bad row raises naming the row."""
    good = cif_text(perovskite())
    pd.DataFrame({"material_id": [7, 8], "cif": [good, good], "gap": [1.0, 2.0]}).to_csv(tmp_path / "t.csv")
    table = read_labelled(tmp_path / "t.csv", "gap")
    assert table["id"].tolist() == ["7", "8"] and table["y"].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"t\.csv.*'band'.*material_id, cif, gap"):
        read_labelled(tmp_path / "t.csv", "band")
    pd.DataFrame({"material_id": [7, 8], "cif": [good, "oops"], "gap": [1.0, 2.0]}).to_csv(tmp_path / "b.csv")
    with pytest.raises(StructureError, match=r"b\.csv:8"):
        read_labelled(tmp_path / "b.csv", "gap")
    pd.DataFrame({"cif": [good], "gap": [float("nan")]}).to_csv(tmp_path / "n.csv")
    with pytest.raises(ValueError, match="finite"):
        read_labelled(tmp_path / "n.csv", "gap")


def test_mixed_inputs_and_objects(tmp_path):
    """Objects get "<input i>" sources; a missing path and an unsupported object are error items."""
    atoms = Atoms("SrTiO3", scaled_positions=FRAC, cell=np.eye(3) * 3.905, pbc=True)
    inputs = [perovskite(), atoms, tmp_path / "nope.cif", EXAMPLES / "SrTiO3.cif", 42]
    items = list(iter_structures(inputs))
    assert [s for s, _ in items] == [
        "<input 0>",
        "<input 1>",
        str(tmp_path / "nope.cif"),
        str(EXAMPLES / "SrTiO3.cif"),
        "<input 4>",
    ]
    assert [isinstance(x, Structure) for _, x in items] == [True, True, False, True, False]
    unknown = list(iter_structures([EXAMPLES / "SrTiO3.cif"], allowed_elements={"Ba", "Zr", "O"}))
    assert isinstance(unknown[0][1], StructureError) and "Sr, Ti" in unknown[0][1].reason


def test_alignn_sample_folder():
    """The real ALIGNN sample: id_prop.csv lists exactly 50 POSCARs, all readable."""
    folder = SHARED / "materials" / "alignn_sample"
    if not (folder / "id_prop.csv").is_file():
        pytest.skip(f"{folder} not present")
    items = list(iter_structures([folder]))
    assert len(items) == 50 and all(isinstance(s, Structure) for _, s in items)
    assert len(read_labelled(folder)) == 50


def test_perov5_csv_streams_lazily():
    """The real perov5 table is read lazily: the first rows arrive without parsing all 3,787."""
    path = SHARED / "materials" / "perov5" / "perov5_train_pool.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    first = list(itertools.islice(iter_structures([path]), 20))
    assert len(first) == 20 and all(isinstance(s, Structure) and len(s) == 5 for _, s in first)
    assert first[0][0] == f"{path}:18517"


# ---- property: CIF round trip ------------------------------------------------------------------------

ELEMENTS = ["H", "Li", "C", "O", "Na", "Si", "Fe", "Sr", "Ti", "Ba"]


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lengths=st.tuples(*[st.floats(1.0, 12.0)] * 3),
    angles=st.tuples(*[st.floats(20.0, 160.0)] * 3),
    sites=st.lists(
        st.tuples(st.sampled_from(ELEMENTS), st.tuples(*[st.integers(0, 9)] * 3)),
        min_size=1,
        max_size=5,
        unique_by=lambda site: site[1],
    ),
)
def test_cif_round_trip_property(tmp_path, lengths, angles, sites):
    """Random cells written as CIF read back with the same composition and lattice, or a StructureError."""
    lines = [
        "data_random",
        *(f"_cell_length_{k} {v:.6f}" for k, v in zip("abc", lengths, strict=True)),
        *(f"_cell_angle_{k} {v:.6f}" for k, v in zip(("alpha", "beta", "gamma"), angles, strict=True)),
        "_symmetry_space_group_name_H-M 'P 1'",
        "loop_",
        "_atom_site_type_symbol",
        "_atom_site_label",
        "_atom_site_fract_x",
        "_atom_site_fract_y",
        "_atom_site_fract_z",
        "_atom_site_occupancy",
    ]
    for n, (element, grid) in enumerate(sites):
        lines.append(f"{element} {element}{n} " + " ".join(f"{g / 10:.2f}" for g in grid) + " 1.0")
    path = tmp_path / "random.cif"
    path.write_text("\n".join(lines) + "\n")
    try:
        s = read_structure(path)
    except StructureError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        return
    expected = pd.Series([e for e, _ in sites]).value_counts().to_dict()
    assert {el.symbol: int(n) for el, n in s.composition.items()} == expected
    np.testing.assert_allclose(s.lattice.abc, lengths, rtol=1e-5)
    np.testing.assert_allclose(s.lattice.angles, angles, rtol=1e-5)
