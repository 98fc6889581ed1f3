"""End to end: ``sciml fit`` → ``sciml export`` → ``sciml crystal predict`` on generated data."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from sciml.cli.main import main
from sciml.core.io.artifact import ArtifactError
from sciml.crystal import load_model, predict

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
    seconds = pd.read_csv(run / "logs" / "metrics.csv")["train_epoch_seconds"].dropna()
    assert len(seconds) == 2 and (seconds > 0).all()  # one wall time per training epoch


def test_artifact_contents(tiny_run):
    art = tiny_run["artifact"]
    assert {p.name for p in art.iterdir()} >= {"config.yaml", "weights.safetensors", "metadata.json",
                                                "calibrator.json", "README.md"}
    meta = json.loads((art / "metadata.json").read_text())
    assert meta["graph"] == {"cutoff": 8.0, "max_neighbors": 12, "g_max": 4.0, "tie_tol": 0.01}
    assert {"Sr", "Ti", "O"} <= set(meta["elements"])
    assert 0.0 <= meta["metrics"]["test_coverage"] <= 1.0 and meta["metrics"]["test_mae"] > 0
    assert "MAE" in (art / "README.md").read_text()


def test_predict_examples_cli(tiny_run, tmp_path, capsys):
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(tiny_run["artifact"]), str(EXAMPLES), "--output", str(out)]) == 0
    df = read_preds(out)
    assert list(df.columns) == ["source", "formula", "n_atoms", "heat_all", "heat_all_lower", "heat_all_upper",
                                "alpha", "domain_pvalue", "in_domain", "note", "error"]
    assert len(df) == len(list(EXAMPLES.iterdir())) and df["error"].isna().all()
    half = (df["heat_all_upper"] - df["heat_all_lower"]) / 2
    assert (half > 0).all() and half.map(math.isfinite).all()  # α = 0.1 is finite with 12 calibration structures
    center = (df["heat_all_upper"] + df["heat_all_lower"]) / 2  # pred ± q (or ± q·σ): centred on the prediction
    assert (center - df["heat_all"]).abs().max() < 1e-5 * (1 + half.max())
    assert "eV/cell" in out.read_text().splitlines()[0]
    captured = capsys.readouterr()
    assert "SrTiO3" in captured.out
    assert "crystal predict: loaded" in captured.err and f"wrote {out}" in captured.err and "note:" not in captured.err


def test_too_small_calibration_set_is_explained(tiny_run, tmp_path, capsys):
    """α below 1/(n+1): infinite bounds in the CSV and one line naming the smallest finite α."""
    from sciml.cli.feedback import smallest_finite_alpha

    n = len(json.loads((tiny_run["artifact"] / "calibrator.json").read_text())["scores"])
    alpha = 0.5 / (n + 1)
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(tiny_run["artifact"]), str(EXAMPLES / "SrTiO3.cif"),
                 "--alpha", f"{alpha}", "--output", str(out)]) == 0
    df = read_preds(out)
    assert (df["heat_all_lower"] == -math.inf).all() and (df["heat_all_upper"] == math.inf).all()
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and f"of {n} calibration structures" in notes[0]
    assert f"--alpha {smallest_finite_alpha(n):g}" in notes[0]


def test_missing_input_is_a_one_line_error_before_any_work(tmp_path, capsys):
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", str(EXAMPLES / "SrTiO3.cif"), str(tmp_path / "nosuch.cif"),
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nosuch.cif: no such file or folder" in err[0]
    assert not out.exists()


def test_export_refuses_to_replace_an_artifact_without_overwrite(tiny_run, tmp_path, capsys):
    ckpt = str(tiny_run["run"] / "checkpoints" / "best.ckpt")
    out = tmp_path / "my-model"
    assert main(["export", "--ckpt", ckpt, "--output", str(out)]) == 0
    assert f"export: wrote {out}" in capsys.readouterr().err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["export", "--ckpt", ckpt, "--calibrate", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {out} already exists (folder); pass --overwrite to replace it, or choose another --output"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched, still uncalibrated
    assert main(["export", "--ckpt", ckpt, "--calibrate", "--output", str(out), "--overwrite"]) == 0
    assert json.loads(before["calibrator.json"]) is None
    assert json.loads((out / "calibrator.json").read_text())["method"] == "split"  # replaced by the calibrated one


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


@pytest.mark.parametrize("verb", [["crystal", "predict", str(ROOT / "examples" / "structures" / "SrTiO3.cif")],
                                  ["hamiltonian", "predict", str(ROOT / "examples" / "hamiltonian" / "water.xyz"),
                                   "--output", "unused"]])
@pytest.mark.parametrize("beta", ["0", "1", "1.5"])
def test_domain_level_outside_unit_interval_is_one_line_error(verb, beta, capsys):
    assert main([*verb, "--beta", beta]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --beta must lie in (0, 1), got {float(beta)}"]
