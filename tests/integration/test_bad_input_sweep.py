"""Bad-input sweep over the command line: every verb and reader gets broken inputs.

Each case must end in a one-line ``error:`` naming the input and the fix, with a non-zero exit code and no
traceback -- or, for batch predictors, an error row for the bad item while the good items are still predicted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
POSCAR = (ROOT / "examples" / "structures" / "POSCAR_LaAlO3").read_text()
CIF = (ROOT / "examples" / "structures" / "SrTiO3.cif").read_text()
AL_LINE = "0.5000000000000000    0.5000000000000000    0.5000000000000000 Al"
C_VECTOR = "0.0000000000000000    0.0000000000000000    3.7900000000000000"

#: file name -> (content, fragment of the expected per-row error)
STRUCTURE_CASES = {
    "empty.cif": (b"", "empty file"),
    "garbage.vasp": (bytes(range(256)) * 8, "binary"),
    "cif_content.vasp": (CIF.encode(), "not a valid POSCAR"),
    "poscar_content.cif": (POSCAR.encode(), "not a valid CIF"),
    "nan.vasp": (POSCAR.replace(AL_LINE, "nan 0.5 0.5 Al").encode(), "not finite"),
    "inf_cell.vasp": (POSCAR.replace(C_VECTOR, "0 0 inf").encode(), "not finite"),
    "huge_cell.vasp": (POSCAR.replace("1.0\n", "1e7\n", 1).encode(), "cell too large"),
    "degenerate.vasp": (POSCAR.replace(C_VECTOR, "3.79 0 0").encode(), "degenerate cell"),
    "zero_atoms.vasp": (POSCAR.split("La Al O")[0].encode() + b"La\n0\ndirect\n", "not a valid POSCAR"),
    "duplicated.vasp": (POSCAR.replace("1 1 3", "1 1 4").encode() + b"0.5 0.5 0.0 O\n", "overlapping atoms"),
    "no_species.vasp": ("\n".join(line.removesuffix(" La").removesuffix(" Al").removesuffix(" O")
                                   for line in POSCAR.splitlines() if line != "La Al O").encode(),
                        "POSCAR has no species line"),
}


def run(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and stderr of ``sciml argv``."""
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_crystal_predict_gives_one_error_row_per_bad_file(tiny_run, tmp_path, capsys):
    folder = tmp_path / "inputs"
    folder.mkdir()
    for name, (content, _) in STRUCTURE_CASES.items():
        (folder / name).write_bytes(content)
    (folder / "good.vasp").write_text(POSCAR)
    out = tmp_path / "pred.csv"
    code, err = run(["crystal", "predict", "--model", tiny_run["artifact"], folder, "--output", out], capsys)
    assert code == 1 and "Traceback" not in err  # some inputs failed, the others were predicted
    import pandas as pd

    rows = pd.read_csv(out, comment="#", keep_default_na=False)
    rows = rows.set_index(rows["source"].map(lambda s: Path(s).name))
    assert len(rows) == len(STRUCTURE_CASES) + 1
    assert rows.loc["good.vasp", "error"] == "" and rows.loc["good.vasp", "heat_all"] != ""
    for name, (_, fragment) in STRUCTURE_CASES.items():
        error = rows.loc[name, "error"]
        assert fragment in error and "\n" not in error and error.startswith(str(folder / name)), (name, error)


def _write_config(tmp_path: Path, tiny_run: dict, **data) -> Path:
    cfg = yaml.safe_load(Path(tiny_run["config"]).read_text())
    cfg["data"] |= data
    cfg["run_dir"] = str(tmp_path / "run")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _csv(tmp_path: Path, tiny_run: dict, edit) -> Path:
    import pandas as pd

    frame = pd.read_csv(tiny_run["data"])
    path = tmp_path / "data.csv"
    edit(frame).to_csv(path, index=False)
    return path


FIT_CASES = {
    "missing config": (lambda t, r: ["fit", "--config", t / "nope.yaml"], ["nope.yaml"]),
    "empty config": (lambda t, r: ["fit", "--config", _touch(t / "empty.yaml", b"")], ["empty.yaml"]),
    "binary config": (lambda t, r: ["fit", "--config", _touch(t / "bin.yaml", bytes(range(256)))], ["bin.yaml"]),
    "unknown task": (lambda t, r: ["fit", "--config", _touch(t / "task.yaml", b"task: bananas\n")], ["task"]),
    "missing data file": (lambda t, r: ["fit", "--config", _write_config(t, r, path=str(t / "gone.csv"))],
                          ["gone.csv"]),
    "no target column": (lambda t, r: ["fit", "--config", _write_config(
        t, r, path=str(_csv(t, r, lambda f: f.drop(columns=["heat_all"]))))], ["data.csv", "heat_all"]),
    "nan target": (lambda t, r: ["fit", "--config", _write_config(
        t, r, path=str(_csv(t, r, lambda f: f.assign(heat_all=float("nan")))))], ["data.csv", "heat_all"]),
    "no cif column": (lambda t, r: ["fit", "--config", _write_config(
        t, r, path=str(_csv(t, r, lambda f: f.drop(columns=["cif"]))))], ["data.csv", "cif"]),
    "bad override": (lambda t, r: ["fit", "--config", r["config"], "--trainer.max_epochs"], ["max_epochs"]),
}


def _touch(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", FIT_CASES)
def test_fit_bad_inputs(case, tiny_run, tmp_path, capsys):
    build, fragments = FIT_CASES[case]
    code, err = run(build(tmp_path, tiny_run), capsys)
    assert_one_line_error(code, err, *fragments)


EXPORT_CASES = {
    "missing checkpoint": lambda t: t / "none.ckpt",
    "empty checkpoint": lambda t: _touch(t / "empty.ckpt", b""),
    "garbage checkpoint": lambda t: _touch(t / "garbage.ckpt", bytes(range(256)) * 4),
    "text checkpoint": lambda t: _touch(t / "text.ckpt", b"model: yes\n"),
}


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_export_bad_checkpoints(case, tmp_path, capsys):
    ckpt = EXPORT_CASES[case](tmp_path)
    code, err = run(["export", "--ckpt", ckpt, "--output", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, ckpt.name)
    assert not (tmp_path / "out").exists()


def test_truncated_checkpoint(tiny_run, tmp_path, capsys):
    data = (Path(tiny_run["run"]) / "checkpoints" / "last.ckpt").read_bytes()
    ckpt = _touch(tmp_path / "cut.ckpt", data[: len(data) // 2])
    code, err = run(["export", "--ckpt", ckpt, "--output", tmp_path / "out"], capsys)
    assert_one_line_error(code, err, "cut.ckpt")


XYZ_CASES = {  # file content -> expected fragment
    "empty.xyz": (b"", "no frames"),
    "garbage.xyz": (bytes(range(256)) * 2, "not a readable xyz"),
    "unknown.xyz": (b"2\nx\nXx 0 0 0\nH 0 0 0.9\n", "unknown element symbol 'Xx'"),
    "nan.xyz": (b"2\nx\nO 0 0 nan\nH 0 0 0.9\n", "non-finite coordinates"),
    "zero.xyz": (b"0\nx\n", "no atoms"),
    "duplicated.xyz": (b"3\nx\nO 0 0 0\nH 0 0 0\nH 0 0.9 0\n", "atoms 1 and 2 are 0.000"),
    "short.xyz": (b"3\nx\nO 0 0 0\nH 0 0 0.9\n", "not a readable xyz"),
}


@pytest.mark.parametrize("name", XYZ_CASES)
def test_data_hamiltonian_bad_xyz(name, tmp_path, capsys):
    pytest.importorskip("pyscf")
    content, fragment = XYZ_CASES[name]
    path = _touch(tmp_path / name, content)
    code, err = run(["data", "hamiltonian", "--xyz", path, "--n", "1", "--basis", "sto-3g", "--out",
                     tmp_path / "out", "--no-progress"], capsys)
    assert_one_line_error(code, err, name, fragment)
    assert not list((tmp_path / "out").glob("**/*.npz"))


GRN_CASES = {
    "missing config": (lambda t: ["--config", t / "none.yaml"], ["none.yaml"]),
    "binary config": (lambda t: ["--config", _touch(t / "bin.yaml", bytes(range(256)))], ["bin.yaml"]),
    "negative size": (lambda t: ["--config", _touch(t / "neg.yaml", b"grn: {n_genes: -5}\n")], ["n_genes"]),
    "unknown key": (lambda t: ["--config", _touch(t / "key.yaml", b"grn: {bogus: 1}\n")], ["bogus"]),
    "wrong type": (lambda t: ["--grn.n_genes", "many"], ["wrong type"]),
    "too many regulators": (lambda t: ["--grn.n_genes", "10"], ["n_regulators"]),
}


@pytest.mark.parametrize("case", GRN_CASES)
def test_data_grn_bad_config(case, tmp_path, capsys):
    pytest.importorskip("anndata")
    build, fragments = GRN_CASES[case]
    code, err = run(["data", "grn", "--output", tmp_path / "sim.h5ad", *build(tmp_path)], capsys)
    assert_one_line_error(code, err, *fragments)
    assert not (tmp_path / "sim.h5ad").exists()


def _perov_csv(tmp_path: Path, tiny_run: dict, edit, name: str = "cal.csv") -> Path:
    import pandas as pd

    path = tmp_path / name
    edit(pd.read_csv(tiny_run["data"])).to_csv(path, index=False)
    return path


CALIBRATE_CASES = {
    "empty csv": (lambda t, r: _touch(t / "empty.csv", b""), ["empty.csv"]),
    "no target column": (lambda t, r: _perov_csv(t, r, lambda f: f.drop(columns=["heat_all"])), ["heat_all"]),
    "nan target": (lambda t, r: _perov_csv(t, r, lambda f: f.assign(heat_all=float("nan"))), ["cal.csv", "nan"]),
    "not a dataset": (lambda t, r: _touch(t / "notes.txt", b"hello\n"), ["notes.txt", "id_prop.csv"]),
}


@pytest.mark.parametrize("case", CALIBRATE_CASES)
def test_calibrate_bad_data(case, tiny_run, tmp_path, capsys):
    build, fragments = CALIBRATE_CASES[case]
    model = tmp_path / "model"
    import shutil

    shutil.copytree(tiny_run["artifact"], model)
    before = (model / "calibrator.json").read_bytes()
    code, err = run(["calibrate", "--model", model, "--data", build(tmp_path, tiny_run)], capsys)
    assert_one_line_error(code, err, *fragments)
    assert (model / "calibrator.json").read_bytes() == before


def _control_variant(tmp_path: Path, name: str) -> Path:
    """A broken copy of the shipped control cells (``examples/cells/grn_control.h5ad``)."""
    import anndata as ad
    import numpy as np

    a = ad.read_h5ad(ROOT / "examples" / "cells" / "grn_control.h5ad")
    path = tmp_path / f"{name}.h5ad"
    if name in ("empty", "garbage"):
        return _touch(path, b"" if name == "empty" else bytes(range(256)) * 4)
    if name == "wrong_label":
        a.obs["condition"] = "ctrl_typo"
    elif name == "nan":
        x = np.asarray(a.X.toarray() if hasattr(a.X, "toarray") else a.X, dtype=np.float32).copy()
        x[3, 4] = np.nan
        a.X = x
    elif name == "reversed_genes":
        a = a[:, a.var_names[::-1]].copy()
    elif name == "missing_genes":
        a = a[:, 2:].copy()
    a.write_h5ad(path)
    return path


CONTROL_CASES = {
    "empty": "not a readable .h5ad",
    "garbage": "not a readable .h5ad",
    "wrong_label": "no control cells labelled 'ctrl'",
    "nan": "NaN/inf",
    "reversed_genes": "different order",
    "missing_genes": "lack",
}


@pytest.mark.parametrize("name", CONTROL_CASES)
def test_perturbation_predict_bad_control_cells(name, tmp_path, capsys):
    pytest.importorskip("anndata")
    control = _control_variant(tmp_path, name)
    code, err = run(["perturbation", "predict", "--model", ROOT / "checkpoints" / "grn-default", "--control",
                     control, "--perturbations", "G001", "--n-cells", "4", "--output", tmp_path / "out.h5ad"], capsys)
    assert_one_line_error(code, err, control.name, CONTROL_CASES[name])
    assert not (tmp_path / "out.h5ad").exists()
