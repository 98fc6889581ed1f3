"""A tiny end-to-end run shared by the integration tests: fit → export on generated perovskites."""

from __future__ import annotations

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
    cfg["model"]["network"] |= {"dim": 16, "n_layers": 1, "heads": 2}
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
