"""The front door from any folder: shipped models by name, ``sciml models``, exit codes, arguments checked first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from sciml.cli.main import main
from sciml.core.io.shipped import ModelNotFoundError, resolve_model, shipped_models
from sciml.core.threads import choose_threads, free_cores

from .conftest import ROOT

SHIPPED = ROOT / "checkpoints"
GOOD = ROOT / "examples" / "structures" / "SrTiO3.cif"


def sciml_elsewhere(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """``sciml argv`` in a fresh interpreter whose working directory is outside the clone."""
    code = "import sys; from sciml.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
                              "OMP_NUM_THREADS": "1"})


# ---------------------------------------------------------------- names
@pytest.mark.parametrize("form", ["perov5-heat-all", "checkpoints/perov5-heat-all"])
def test_shipped_name_resolves_from_any_folder(tmp_path, monkeypatch, form):
    monkeypatch.chdir(tmp_path)
    assert resolve_model(form) == SHIPPED / "perov5-heat-all"


def test_existing_path_wins_over_a_shipped_name(tmp_path, monkeypatch):
    (tmp_path / "perov5-heat-all").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model("perov5-heat-all").resolve() == (tmp_path / "perov5-heat-all").resolve()


def test_wrong_name_suggests_the_closest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("perov5-heat")
    text = str(info.value)
    assert "\n" not in text and text.startswith("perov5-heat: no such model folder") and "perov5-heat-all" in text
    with pytest.raises(ModelNotFoundError, match="shipped models: carbon24-energy"):
        resolve_model(tmp_path / "zzz")


def test_every_family_loads_a_shipped_model_by_name(tmp_path, monkeypatch):
    from sciml.crystal import load_model as crystal
    from sciml.perturbation.artifact import load_model as perturbation

    monkeypatch.chdir(tmp_path)
    assert crystal("perov5-heat-all").path == SHIPPED / "perov5-heat-all"
    assert perturbation("checkpoints/grn-default").path == SHIPPED / "grn-default"
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.artifact import load_model as hamiltonian

    assert hamiltonian("water-pbe-def2svp").path == SHIPPED / "water-pbe-def2svp"


def test_crystal_predict_by_name_outside_the_clone(tmp_path):
    out = tmp_path / "x.csv"
    proc = sciml_elsewhere(tmp_path, "crystal", "predict", "--model", "perov5-heat-all", str(GOOD), "--output",
                           str(out))
    assert proc.returncode == 0, proc.stderr
    row = pd.read_csv(out, comment="#").iloc[0]
    assert row["formula"] == "SrTiO3" and pd.isna(row["error"])
    wrong = sciml_elsewhere(tmp_path, "crystal", "predict", "--model", "perov5-heat", str(GOOD))
    assert wrong.returncode == 2 and "did you mean perov5-heat-all?" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- sciml models
def test_models_lists_every_shipped_model_with_family_target_data_domain(capsys):
    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert set(listed) == set(shipped_models()) and "perov5-heat-all" in listed
    perov = listed["perov5-heat-all"]
    assert perov["family"] == "crystal" and perov["target"] == "heat_all (eV/cell)"
    assert "perov5_train_pool.csv" in perov["trained_on"] and "2651 train" in perov["trained_on"]
    assert "56 elements" in perov["domain"] and "p <= 0.05" in perov["domain"]
    grn = listed["grn-default"]
    assert grn["family"] == "perturbation" and "20 of them perturbed" in grn["domain"]
    organic = listed["organic-pbe-def2svp"]["domain"]
    assert organic.startswith("4 elements (H C N O), molecules of 2-18 atoms (0-10 heavy)")
    assert listed["si-c-pbe-gth"]["family"] == "hamiltonian"
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert all(f"{name}  (" in text for name in listed) and "--model perov5-heat-all" in text


# ---------------------------------------------------------------- exit codes
def test_folder_of_only_broken_files_exits_3(tmp_path, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "a.cif").write_text("data_x\nnot a cif\n")
    (folder / "b.vasp").write_text("")
    out = tmp_path / "p.csv"
    assert main(["crystal", "predict", str(folder), "--output", str(out)]) == 3
    assert "exit code 3" in capsys.readouterr().err
    rows = pd.read_csv(out, comment="#")
    assert len(rows) == 2 and rows["error"].str.startswith(str(folder)).all()


def test_empty_folder_exits_3(tmp_path):
    (tmp_path / "none").mkdir()
    assert main(["crystal", "predict", str(tmp_path / "none")]) == 3


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "exit codes:" in text and all(f"  {code} " in text for code in (0, 1, 2, 3))


# ---------------------------------------------------------------- arguments before work
@pytest.mark.parametrize("argv", [
    ["export", "--ckpt", "CKPT", "--alpha", "1.5", "--output", "OUT"],
    ["crystal", "predict", str(GOOD), "--alpha", "1.5"],
    ["crystal", "predict", str(GOOD), "--beta", "0"],
    ["crystal", "predict", str(GOOD), "--threads", "0"],
    ["crystal", "predict", "missing.cif"],
    ["crystal", "calibrate", "--model", "perov5-heat-all", "--data", "x.csv", "--alpha", "2"],
    ["calibrate", "--model", "perov5-heat-all", "--data", "x.csv", "--alpha", "2"],
])
def test_bad_arguments_fail_at_once(tmp_path, capsys, argv):
    ckpt = tmp_path / "best.ckpt"
    ckpt.write_bytes(b"x" * 10)  # never read: the argument check comes first
    argv = [str(ckpt) if a == "CKPT" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    start = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert time.perf_counter() - start < 5  # checked before any model, checkpoint or data is read
    assert not (tmp_path / "out").exists()


def test_shipped_model_by_name_is_not_recalibrated_in_place(capsys):
    assert main(["crystal", "calibrate", "--model", "perov5-heat-all", "--data", str(GOOD)]) == 2
    assert "pass --output DIR" in capsys.readouterr().err


# ---------------------------------------------------------------- threads
def test_threads_rule():
    assert choose_threads(3, {"OMP_NUM_THREADS": "2"}) == (3, "--threads")
    assert choose_threads(None, {"OMP_NUM_THREADS": "2"}) == (2, "OMP_NUM_THREADS")
    assert choose_threads(None, {"OMP_NUM_THREADS": "4,2"}) == (4, "OMP_NUM_THREADS")
    assert choose_threads(None, {})[1] == "free cores"
    assert free_cores(load=1.0, cores=2) == 1 and free_cores(load=0.4, cores=2) == 2
    assert free_cores(load=7.6, cores=4) == 1 and free_cores(load=1.5, cores=16) == 14
    for bad, env in ((0, {}), (None, {"OMP_NUM_THREADS": "two"})):
        with pytest.raises(ValueError):
            choose_threads(bad, env)


@pytest.mark.parametrize("family, model", [("crystal", "perov5-heat-all"), ("hamiltonian", "water-pbe-def2svp"),
                                           ("perturbation", "grn-default")])
def test_calibrate_never_rewrites_a_shipped_model_named_by_name(family, model, capsys):
    """Every family's calibrate verb refuses, before any work, to rewrite a shipped model in place."""
    code = main([family, "calibrate", "--model", model, "--operation", "domain"])
    err = capsys.readouterr().err
    assert code == 2 and f"{model} is a shipped model: pass --output" in err


def test_calibrate_refuses_an_existing_output_folder(tmp_path, capsys):
    code = main(["perturbation", "calibrate", "--model", "grn-default", "--operation", "domain",
                 "--output", str(tmp_path)])
    assert code == 2 and "already exists; choose another --output" in capsys.readouterr().err
