"""End to end: ``sciml fit`` → ``sciml export`` → ``sciml crystal predict`` on generated data."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from sciml.cli.main import main
from sciml.crystal import load_model, predict
from sciml.core.io.artifact import ArtifactError

from .conftest import ROOT

EXAMPLES = ROOT / "examples" / "structures"


def read_preds(path):
    return pd.read_csv(path, comment="#", keep_default_na=False, na_values=[""])


def test_fit_writes_run_folder(tiny_run):
    run = tiny_run["run"]
    for name in ("config.yaml", "split.json", "calibrator.json", "checkpoints/best.ckpt", "checkpoints/last.ckpt",
                 "logs/metrics.csv"):
        assert (run / name).is_file(), name
    split = json.loads((run / "split.json").read_text())
    ids = [i for k in ("train", "val", "calib", "test") for i in split[k]]
    assert len(ids) == len(set(ids)) == 80 and split["seed"] == 1
    assert list((run / "tb").glob("events.out.tfevents*"))


def test_artifact_contents(tiny_run):
    art = tiny_run["artifact"]
    assert {p.name for p in art.iterdir()} >= {"config.yaml", "weights.safetensors", "metadata.json",
                                                "calibrator.json", "README.md"}
    meta = json.loads((art / "metadata.json").read_text())
    assert meta["graph"] == {"cutoff": 8.0, "max_neighbors": 12, "g_max": 4.0}
    assert {"Sr", "Ti", "O"} <= set(meta["elements"])
    assert 0.0 <= meta["metrics"]["test_coverage"] <= 1.0 and meta["metrics"]["test_mae"] > 0
    assert "MAE" in (art / "README.md").read_text()


def test_predict_examples_cli(tiny_run, tmp_path, capsys):
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(tiny_run["artifact"]), str(EXAMPLES), "--output", str(out)]) == 0
    df = read_preds(out)
    assert list(df.columns) == ["source", "formula", "n_atoms", "heat_all", "heat_all_lower", "heat_all_upper",
                                "alpha", "note", "error"]
    assert len(df) == len(list(EXAMPLES.iterdir())) and df["error"].isna().all()
    assert (df["heat_all_lower"] <= df["heat_all"]).all() and (df["heat_all"] <= df["heat_all_upper"]).all()
    assert "eV/cell" in out.read_text().splitlines()[0]
    assert "SrTiO3" in capsys.readouterr().out


def test_python_api_matches_cli_and_reuses_loaded_model(tiny_run, tmp_path):
    model = load_model(tiny_run["artifact"])
    df = predict([EXAMPLES], model=model, alpha=0.2)
    wide = predict(str(EXAMPLES), model=tiny_run["artifact"], alpha=0.05)
    assert (df["heat_all"] == wide["heat_all"]).all()
    assert ((wide["heat_all_upper"] - wide["heat_all_lower"]) >= (df["heat_all_upper"] - df["heat_all_lower"])).all()


def test_supercell_prediction_scales_for_extensive_target(tiny_run):
    from pymatgen.core import Structure

    s = Structure.from_file(EXAMPLES / "SrTiO3.cif")
    df = predict([s, s.make_supercell([2, 1, 1], in_place=False)], model=tiny_run["artifact"])
    assert df["heat_all"][1] == pytest.approx(2 * df["heat_all"][0], rel=1e-4)


def test_graph_setting_mismatch_is_an_error(tiny_run):
    with pytest.raises(ArtifactError, match="differ"):
        load_model(tiny_run["artifact"], graph={"cutoff": 6.0, "max_neighbors": 12, "g_max": 4.0})
    assert load_model(tiny_run["artifact"], graph={"cutoff": 8.0, "max_neighbors": 12, "g_max": 4.0})


def test_resume_from_last_checkpoint(tiny_run, tmp_path):
    run = tmp_path / "run"
    base = ["fit", "--config", str(tiny_run["config"]), "--run_dir", str(run), "--model.optim.scheduler", "none"]
    assert main([*base, "--trainer.max_epochs", "1"]) == 0
    first = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert main([*base, "--trainer.max_epochs", "2", "--ckpt_path", "last"]) == 0
    second = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert (first["epoch"], second["epoch"]) == (0, 1)
    assert second["global_step"] == 2 * first["global_step"]  # epoch 0 restored, only epoch 1 trained


def test_test_verb_evaluates_a_checkpoint(tiny_run, capsys):
    ckpt = tiny_run["run"] / "checkpoints" / "best.ckpt"
    assert main(["test", "--config", str(tiny_run["config"]), "--ckpt_path", str(ckpt),
                 "--trainer.enable_progress_bar", "false"]) == 0
    out = capsys.readouterr().out
    metrics = json.loads(out[out.rindex("{"):])
    assert metrics["test_mae"] > 0


def test_bad_config_and_override_are_one_line_errors(tmp_path, capsys):
    assert main(["fit", "--config", str(tmp_path / "missing.yaml")]) != 0
    assert "no such config file" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: nonsense\n")
    assert main(["fit", "--config", str(bad), "--run_dir", str(tmp_path / "r")]) != 0
    assert "known tasks" in capsys.readouterr().err
