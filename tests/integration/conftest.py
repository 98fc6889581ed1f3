"""A tiny end-to-end run shared by the integration tests: fit → export on generated perovskites."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from sciml.cli.main import main
from sciml.testing.fixtures import write_perovskite_csv

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(tmp: Path, data: Path) -> Path:
    """The real perov5 config, overridden to a 2-epoch, 16-wide model on generated data."""
    cfg = yaml.safe_load((ROOT / "configs" / "crystal" / "perov5.yaml").read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["threads"] = 1
    cfg["data"] |= {"path": str(data), "batch_size": 16, "split": {"fractions": [0.6, 0.1, 0.15, 0.15], "seed": 1}}
    cfg["model"]["network"] |= {"dim": 16, "n_layers": 1}
    cfg["trainer"] |= {"max_epochs": 2, "enable_progress_bar": False, "enable_model_summary": False,
                       "log_every_n_steps": 1}
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> dict:
    """Fit and export once; return the paths the tests inspect."""
    tmp = tmp_path_factory.mktemp("crystal")
    data = write_perovskite_csv(tmp / "toy.csv", n=80, seed=0)
    config = tiny_config(tmp, data)
    assert main(["fit", "--config", str(config)]) == 0
    run = tmp / "run"
    artifact = tmp / "artifact"
    assert main(["export", "--ckpt", str(run / "checkpoints" / "best.ckpt"), "--calibrate",
                 "--output", str(artifact)]) == 0
    return {"tmp": tmp, "data": data, "config": config, "run": run, "artifact": artifact}


def sciml_command() -> list[str]:
    """The installed ``sciml`` console script (DDP relaunches ``sys.argv``, so it must be a real command)."""
    script = Path(sys.executable).parent / "sciml"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sciml.cli.main"]


@pytest.fixture
def clean_env() -> dict:
    """Environment for ``sciml`` subprocesses: no SLURM/DDP variables leaking in, one thread per process."""
    names = {"RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "PL_")) and k not in names}
    return env | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def tiny_data(tmp_path) -> dict:
    """Generated perovskites and the tiny config in a fresh folder (for tests that start their own fits)."""
    data = write_perovskite_csv(tmp_path / "toy.csv", n=80, seed=0)
    return {"tmp": tmp_path, "data": data, "config": tiny_config(tmp_path, data)}
