"""``sciml calibrate``: refit a shipped artifact's calibrator on generated labelled data, atomically."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from sciml.cli.main import main
from sciml.testing.fixtures import write_perovskite_csv

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "perov5-heat-all"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Generated perovskites with the shipped model's target column ``heat_all``."""
    return write_perovskite_csv(tmp_path_factory.mktemp("calib") / "toy.csv", n=40, seed=3)


@pytest.fixture
def model(tmp_path) -> Path:
    """A private copy of the shipped artifact."""
    if not SHIPPED.is_dir():
        pytest.skip("shipped artifact checkpoints/perov5-heat-all is absent")
    return Path(shutil.copytree(SHIPPED, tmp_path / "model"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_split_refit_writes_calibrator_and_record(model: Path, data: Path, capsys) -> None:
    """Exit 0; before/after printed; calibrator.json replaced; weights and their checksum untouched."""
    from sciml.crystal.artifact import load_model

    weights = _sha(model / "weights.safetensors")
    assert main(["calibrate", "--model", str(model), "--data", str(data), "--method", "split",
                 "--alpha", "0.2", "--score", "absolute"]) == 0
    out = capsys.readouterr().out
    assert "before" in out and "after" in out and "held-out structures: 20" in out
    cal = json.loads((model / "calibrator.json").read_text())
    assert cal["method"] == "split" and cal["score"] == "absolute" and len(cal["scores"]) == 20
    meta = json.loads((model / "metadata.json").read_text())
    rec = meta["recalibration"]
    assert rec["calibrator_sha256"] == _sha(model / "calibrator.json")
    assert meta["weights_sha256"] == weights == _sha(model / "weights.safetensors")
    assert 0 <= rec["after"]["coverage"] <= 1 and rec["before"]["coverage"] is not None
    assert load_model(model).calibrator.alpha == 0.2
    assert not [p for p in model.parent.iterdir() if p.name.startswith(".model.")]  # no temp folder left


def test_crystal_calibrate_with_output_leaves_the_model_unchanged(model: Path, data: Path, tmp_path: Path) -> None:
    """``sciml crystal calibrate --operation conformal --output``: a recalibrated copy, the source byte-identical."""
    from sciml.crystal.artifact import load_model

    before = {p.name: _sha(p) for p in model.iterdir()}
    out = tmp_path / "recalibrated"
    assert main(["crystal", "calibrate", "--model", str(model), "--operation", "conformal", "--data", str(data),
                 "--alpha", "0.2", "--output", str(out)]) == 0
    assert {p.name: _sha(p) for p in model.iterdir()} == before
    assert load_model(out).calibrator.alpha == 0.2
    assert _sha(out / "weights.safetensors") == before["weights.safetensors"]
    assert main(["crystal", "calibrate", "--model", str(model), "--data", str(data), "--output", str(out)]) == 2


def test_mondrian_by_crystal_system_predicts(model: Path, data: Path) -> None:
    """Mondrian by crystal system: stored with group_by, and crystal prediction uses it without options."""
    from sciml.crystal.predict import predict

    assert main(["calibrate", "--model", str(model), "--data", str(data), "--method", "mondrian",
                 "--group-by", "crystal_system"]) == 0
    cal = json.loads((model / "calibrator.json").read_text())
    assert cal["method"] == "mondrian" and cal["group_by"] == "crystal_system"
    table = predict(str(data), model=str(model), alpha=0.1)
    assert (table["error"] == "").all()
    assert (table["heat_all_lower"] <= table["heat_all"]).all() and (table["heat_all"] <= table["heat_all_upper"]).all()


def test_failed_write_leaves_artifact_intact(model: Path, data: Path, monkeypatch) -> None:
    """A crash while the new folder is written leaves the old artifact byte-identical."""
    before = {p.name: _sha(p) for p in model.iterdir()}

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("sciml.crystal.calibrate.shutil.copy2", boom)
    assert main(["calibrate", "--model", str(model), "--data", str(data)]) == 2
    assert {p.name: _sha(p) for p in model.iterdir()} == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--target", "nope"], "target column 'nope' not found"),
     (["--holdout", "1.5"], "--holdout must be in (0, 1)"),
     (["--alpha", "2"], "--alpha must lie in (0, 1)")],
)
def test_bad_input_one_line_error(model: Path, data: Path, capsys, extra: list[str], message: str) -> None:
    """Bad target, holdout or alpha: exit 2 and a one-line error naming the field."""
    assert main(["calibrate", "--model", str(model), "--data", str(data), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_missing_model_folder(tmp_path: Path, data: Path, capsys) -> None:
    """A missing artifact folder names the path and how to create one."""
    assert main(["calibrate", "--model", str(tmp_path / "none"), "--data", str(data)]) == 2
    assert "no such model folder" in capsys.readouterr().err


def test_id_prop_folder_input(model: Path, data: Path, tmp_path: Path) -> None:
    """A folder with id_prop.csv and CIF files works like the CSV; the record holds the id_prop.csv hash."""
    import pandas as pd

    folder = tmp_path / "cifs"
    folder.mkdir()
    table = pd.read_csv(data)
    for ident, cif in zip(table["material_id"], table["cif"], strict=True):
        (folder / f"{ident}.cif").write_text(cif)
    table[["material_id", "heat_all"]].to_csv(folder / "id_prop.csv", header=False, index=False)
    assert main(["calibrate", "--model", str(model), "--data", str(folder), "--holdout", "0.25"]) == 0
    rec = json.loads((model / "metadata.json").read_text())["recalibration"]
    assert rec["n_fit"] == 30 and rec["n_holdout"] == 10
    assert rec["data_sha256"] == _sha(folder / "id_prop.csv")


def test_multigroup_refit_and_predict(model: Path, data: Path) -> None:
    """Overlapping crystal-system and anion groups through the CLI, then crystal prediction with them."""
    from sciml.crystal.predict import predict

    assert main(["calibrate", "--model", str(model), "--data", str(data), "--method", "multigroup"]) == 0
    cal = json.loads((model / "calibrator.json").read_text())
    assert cal["method"] == "multigroup" and cal["group_by"] == ["crystal_system", "anion"]
    table = predict(str(data), model=str(model), alpha=0.2)
    assert (table["error"] == "").all() and (table["heat_all_lower"] <= table["heat_all_upper"]).all()


def test_unknown_group_function(model: Path, data: Path, capsys) -> None:
    """A misspelt --group-by names the known group functions."""
    assert main(["calibrate", "--model", str(model), "--data", str(data), "--method", "multigroup",
                 "--group-by", "crystal_system,colour"]) == 2
    assert "unknown group function" in capsys.readouterr().err


def test_zero_inflated_model_is_refused_in_one_line(tmp_path: Path, data: Path, capsys) -> None:
    """A band-gap (hurdle) model is not silently given a plain calibrator: one line says how to recalibrate it."""
    shipped = SHIPPED.parent / "mp-band-gap"
    if not shipped.is_dir():
        pytest.skip("shipped artifact checkpoints/mp-band-gap is absent")
    model = Path(shutil.copytree(shipped, tmp_path / "gap"))
    before = _sha(model / "calibrator.json")
    assert main(["calibrate", "--model", str(model), "--data", str(data), "--target", "heat_all"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "zero-inflated" in err and "sciml export --calibrate" in err
    assert "\n" not in err and _sha(model / "calibrator.json") == before
