"""``pip install .`` (not editable) runs the README's main job from package data, outside the source tree.

The package is built from a copy of the sources and installed with ``--no-deps --no-build-isolation --no-index``
into a fresh virtual environment that sees the test interpreter's packages (torch, pymatgen, ... and setuptools),
so nothing is downloaded. The main job of the README then runs from a folder outside the repository that holds
only the example inputs: the default model can come from nowhere but ``sciml/_shipped/`` inside the install; a
shipped model named by ``--model mp-formation-energy`` and the list of ``sciml models`` come from there too.
"""

from __future__ import annotations

import filecmp
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd

from .conftest import ROOT
from .test_readme_commands import main_command, shell_commands

SOURCES = ("pyproject.toml", "setup.py", "README.md", "sciml", "checkpoints", "examples")


def _venv(folder: Path) -> Path:
    """A virtual environment at ``folder`` that imports the running interpreter's packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # inside a venv, --system-site-packages reaches the base interpreter only: add this venv's packages as a plain
    # path (its .pth files, e.g. an editable sciml's import hook, are not run, so the installed sciml is the one)
    (Path(site) / "test_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_pip_install_runs_the_main_job_from_package_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    python = _venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"OMP_NUM_THREADS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", str(src)], env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "elsewhere"  # a user's folder: the example inputs, no checkpoints/, no source tree
    shutil.copytree(ROOT / "examples" / "structures", work / "examples" / "structures")
    where = subprocess.run([str(python), "-c", "import sciml, sciml.crystal.artifact as a; "
                            "print(sciml.__file__); print(a.DEFAULT_MODEL)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout.split()
    package = Path(where[0]).parent
    assert package.is_relative_to(tmp_path / "venv"), f"imported {where[0]}, not the installed package"
    assert Path(where[1]) == package / "_shipped" / "checkpoints" / "mp-formation-energy"
    for model in (ROOT / "checkpoints").iterdir():  # every shipped model, byte for byte
        files = sorted(p.name for p in model.iterdir())
        match, mismatch, errors = filecmp.cmpfiles(model, package / "_shipped" / "checkpoints" / model.name, files,
                                                   shallow=False)
        assert not mismatch and not errors, f"{model.name}: {mismatch + errors} differ or are missing in the wheel"
    assert (package / "_shipped" / "examples" / "hamiltonian" / "water.xyz").exists()

    job = shell_commands(main_command())[-1]  # sciml crystal predict examples/structures --output preds.csv
    run = subprocess.run([str(python.parent / "sciml"), *job[1:]], cwd=work, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    table = pd.read_csv(work / job[job.index("--output") + 1], comment="#")
    inputs = sorted(p.name for p in (work / "examples" / "structures").iterdir())
    assert sorted(Path(s).name for s in table["source"]) == inputs
    assert table["error"].isna().all(), table["error"].tolist()
    fe = "formation_energy_per_atom"
    width = table[f"{fe}_upper"] - table[f"{fe}_lower"]  # conditional calibration: one width per group pattern
    assert all(math.isfinite(v) for v in [*table[fe], *width]) and width.min() > 0

    # shipped models by name, and the list of them, from the install alone
    by_name = subprocess.run([str(python.parent / "sciml"), "crystal", "predict", "--model", "mp-formation-energy",
                              "examples/structures/SrTiO3.cif", "--output", "by_name.csv"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600)
    assert by_name.returncode == 0, by_name.stderr[-3000:]
    same = table.set_index(table["source"].map(lambda s: Path(s).name)).loc["SrTiO3.cif", fe]
    assert abs(pd.read_csv(work / "by_name.csv", comment="#")[fe].iloc[0] - same) < 1e-5  # float32, batch
    listed = subprocess.run([str(python.parent / "sciml"), "models", "--json"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert {m["name"] for m in json.loads(listed.stdout)} == {p.name for p in (ROOT / "checkpoints").iterdir()}
