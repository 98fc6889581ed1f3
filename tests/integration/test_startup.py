"""The front door stays light: what ``sciml --help`` and an early input error import (timings: benchmarks/startup.py).

Each check runs in a fresh interpreter and reads ``sys.modules``: an import check, not a timing test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from sciml.cli.feedback import infinite_interval_note, smallest_finite_alpha
from sciml.core.optional import MissingDependencyError, require

from .conftest import ROOT

HEAVY = ("torch", "lightning", "pymatgen", "anndata", "scanpy", "e3nn", "torch_geometric", "matplotlib", "pyscf")


def imported_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; return ``{"heavy": [...], "out": <value of OUT>}``."""
    probe = (f"import sys, json\nOUT = None\n{code}\n"
             f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), 'out': OUT}}))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_imports_no_heavy_package():
    got = imported_after("from sciml.cli.main import build_parser\nOUT = build_parser().format_help()")
    assert got["heavy"] == []
    assert all(verb in got["out"] for verb in ("fit", "export", "crystal", "perturbation", "calibrate"))


def test_every_sub_verb_help_is_light():
    code = ("from sciml.cli.main import build_parser\nimport contextlib, io\np = build_parser()\nOUT = []\n"
            "for argv in (['crystal', 'predict'], ['perturbation', 'predict'], ['export'], ['calibrate'],\n"
            "             ['data', 'grn'], ['fit'], ['hamiltonian', 'predict'], ['hamiltonian', 'calibrate']):\n"
            "    buf = io.StringIO()\n"
            "    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):\n"
            "        p.parse_args([*argv, '--help'])\n"
            "    OUT.append(buf.getvalue())")
    got = imported_after(code)
    assert got["heavy"] == [] and all("usage: sciml" in text for text in got["out"])


@pytest.mark.parametrize("argv", [
    ["crystal", "predict", "--model", "checkpoints/perov5-heat-all", "nosuch.cif", "--output", "x.csv"],
    ["perturbation", "predict", "--control", "nosuch.h5ad", "--perturbations", "G001", "--output", "x.h5ad"],
    ["calibrate", "--model", "checkpoints/perov5-heat-all", "--data", "nosuch.csv"],
])
def test_missing_input_fails_before_heavy_imports(argv):
    code = ("import contextlib, io\nfrom sciml.cli.main import main\nerr = io.StringIO()\n"
            f"with contextlib.redirect_stderr(err):\n    code = main({argv!r})\nOUT = [code, err.getvalue()]")
    got = imported_after(code)
    code, err = got["out"]
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: nosuch.") and "no such file" in err
    assert got["heavy"] == []


def test_package_imports_are_lazy_and_resolve_on_use():
    got = imported_after("import sciml, sciml.crystal, sciml.perturbation\nOUT = sorted(sciml.crystal.__all__)")
    assert got["heavy"] == [] and got["out"] == ["CrystalPredictor", "iter_prediction_rows", "load_model", "predict"]
    import sciml.crystal
    import sciml.crystal.predict  # binds the submodule on the package: the public name must stay the function
    import sciml.perturbation
    from sciml.crystal import predict

    assert callable(predict) and predict.__module__ == "sciml.crystal.predict"
    assert sciml.perturbation.parse_perturbations("A+B, C") == ["A+B", "C"]
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = sciml.crystal.nonsense


def test_calibrate_help_names_the_registered_group_functions():
    from sciml.cli.calibrate import GROUP_NAMES
    from sciml.crystal.calibration import GROUP_FUNCTIONS

    assert set(GROUP_NAMES) <= set(GROUP_FUNCTIONS) and sorted(GROUP_NAMES) == list(GROUP_NAMES)


def test_require_names_the_package_and_the_extra():
    with pytest.raises(MissingDependencyError, match=r"^needs POT: pip install 'sciml\[cells\]'$"):
        require("sciml_no_such_module_ot", "cells", package="POT")
    with pytest.raises(MissingDependencyError, match=r"^needs sciml_nope: pip install sciml_nope$"):
        require("sciml_nope.sub")
    assert require("json").dumps([1]) == "[1]"
    with pytest.raises(ModuleNotFoundError) as info:  # a missing submodule of an installed package is not renamed
        require("json.no_such_submodule", "cells")
    assert not isinstance(info.value, MissingDependencyError)


@pytest.mark.parametrize("n", [1, 2, 6, 7, 9, 12, 19, 99, 378, 999, 4000])
def test_smallest_finite_alpha_is_the_boundary_rounded_up(n):
    from sciml.uq.quantile import conformal_rank

    alpha = smallest_finite_alpha(n)
    assert conformal_rank(n, alpha) <= n  # finite at the suggested α
    assert 1 / (n + 1) <= alpha <= 1.1 * (1 / (n + 1)) + 1e-12  # and not much above the exact boundary
    assert conformal_rank(n, 0.999 / (n + 1)) > n  # just below the boundary: infinite
    assert math.isnan(smallest_finite_alpha(0))


def test_infinite_interval_note():
    assert smallest_finite_alpha(6) == 0.15 and smallest_finite_alpha(7) == 0.13 and smallest_finite_alpha(99) == 0.01
    assert infinite_interval_note([7], 0.2) == ""
    note = infinite_interval_note([7], 0.1)
    assert note.startswith("note: at α=0.1") and "8-th smallest of 7" in note and "--alpha 0.13" in note
    assert "\n" not in note
    groups = infinite_interval_note([40, 3, 25], 0.1, "calibration structures")
    assert "1 of 3 calibration groups" in groups and "smallest: 3" in groups and "--alpha 0.25" in groups


def test_hamiltonian_predict_path_skips_dynamo_pandas_and_pymatgen():
    """Loading an equivariant model and reading an .xyz import none of them (1.2, 0.4 and 0.5 s of each command)."""
    code = ("from sciml.hamiltonian.artifact import load_model\n"
            "from sciml.hamiltonian.inputs import check_elements, read_xyz\n"
            "import sciml.hamiltonian.predict\n"
            "p = load_model('checkpoints/water-pbe-def2svp')\n"
            "numbers, pos = read_xyz('examples/hamiltonian/water.xyz')\n"
            "check_elements(numbers, p.layout, 'water.xyz')\n"
            "OUT = [sorted(m for m in ('torch._dynamo', 'pandas', 'pymatgen') if m in sys.modules), numbers.tolist()]")
    got = imported_after(code)
    assert got["out"] == [[], [8, 1, 1]] and "e3nn" in got["heavy"]


def test_hamiltonian_face_is_lazy():
    """``import sciml.hamiltonian`` lists ``load_model`` and ``predict`` and imports none of the heavy packages."""
    got = imported_after("import sciml.hamiltonian as h\nOUT = sorted(h.__all__)")
    assert got["heavy"] == [] and {"load_model", "predict", "MoleculePrediction"} <= set(got["out"])


@pytest.mark.parametrize("code", ["import sciml.hamiltonian.nn.layers",
                                  "from sciml.hamiltonian.harmonics import e3nn_harmonics\n"
                                  "e3nn_harmonics(2, [[0.0, 0.0, 1.0]])"])
def test_any_first_e3nn_import_skips_dynamo(code):
    got = imported_after(f"{code}\nOUT = 'torch._dynamo' in sys.modules")
    assert got["out"] is False and "e3nn" in got["heavy"]


@pytest.mark.parametrize("entry", [
    "from sciml.cli.main import main\ncode = main(['crystal', 'predict', 'examples/structures/SrTiO3.cif', "
    "'--output', OUTPUT, '--threads', '1'])",
    "from sciml.crystal import predict\ncode = int(predict(['examples/structures/SrTiO3.cif'])['error'].any())",
])
def test_crystal_predict_path_skips_training_cell_and_quantum_packages(entry, tmp_path):
    """A one-file crystal prediction (command or Python API) imports none of the packages it does not use.

    Lightning, scanpy, anndata, pyscf, e3nn and matplotlib, and ``torch._dynamo`` (kept out by :mod:`sciml.core.pyg`)
    were most of the one-file command's start-up (``benchmarks/crystal_speed.py``, ``one_file_command``).
    """
    unused = ("lightning", "pytorch_lightning", "scanpy", "anndata", "pyscf", "e3nn", "matplotlib", "torch._dynamo")
    code = (f"import contextlib, io\nOUTPUT = {str(tmp_path / 'one.csv')!r}\n"
            f"with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            + "".join(f"    {line}\n" for line in entry.splitlines())
            + f"OUT = [code, sorted(m for m in {unused!r} if m in sys.modules)]")
    got = imported_after(code)
    assert got["out"] == [0, []], f"exit code and unused packages imported: {got['out']}"
    assert {"torch", "torch_geometric", "pymatgen"} <= set(got["heavy"])
