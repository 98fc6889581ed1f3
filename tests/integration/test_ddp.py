"""``sciml fit`` under Lightning DDP with 2 CPU processes (gloo) against the same fit in 1 process.

The runs see the same global batch: the 48 training structures in one batch (48 in one process, 24 per
rank), so shuffling cannot make the runs differ, and per-rank losses are means over equal shards whose
gradient average is the 1-process gradient. Dropout is off (per-process random masks); batch norm is
synchronised across ranks (the DDP default of ``sciml.core.train``); validation (8 structures) splits evenly,
and the 11 calibration structures split unevenly (6 + 5) to exercise the gather with true lengths.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from sciml.cli.config import apply_overrides, load_config
from sciml.core.train import train

from .conftest import sciml_command

# dropout off: each process draws its own masks, so 2 processes cannot reproduce 1 process's masks
COMMON = ["--trainer.max_epochs", "3", "--trainer.accelerator", "cpu", "--trainer.deterministic", "true",
          "--data.split", "{fractions: [0.6, 0.1, 0.1375, 0.1625], seed: 1}", "--model.network.dropout", "0"]
# float32 sums in a different order (one mean over 48 vs the average of two means over 24, all-reduced
# batch-norm statistics) differ by ~1e-7 relative after 3 Adam steps; 1e-5 leaves room for that and still
# catches unsynchronised batch norm (~4e-4 here) or a double-counted sample
RTOL = 1e-5


def test_two_process_ddp_matches_one_process_and_writes_one_run(tiny_data, clean_env):
    tmp, config = tiny_data["tmp"], tiny_data["config"]
    single = train(apply_overrides(load_config(config), [*COMMON, "--data.batch_size", "48",
                                                         "--run_dir", str(tmp / "single")]))

    run = tmp / "ddp"
    cmd = [*sciml_command(), "fit", "--config", str(config), *COMMON, "--data.batch_size", "24",
           "--trainer.strategy", "ddp", "--trainer.devices", "2", "--run_dir", str(run)]
    proc = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Starting with 2 processes" in proc.stderr and "distributed_backend=gloo" in proc.stderr
    assert proc.stdout.count('"val_mae"') == 1  # rank 0 alone prints the metrics
    ddp = json.loads(proc.stdout[proc.stdout.rindex("{"):])
    for key in ("val_mae", "val_loss", "train_loss"):
        assert ddp[key] == pytest.approx(single[key], rel=RTOL), key

    # one run directory, every file written once, by rank 0
    assert sorted(p.name for p in tmp.iterdir() if p.is_dir()) == ["ddp", "single"]
    assert sorted(p.name for p in run.iterdir()) == ["calibrator.json", "checkpoints", "config.yaml", "logs",
                                                     "split.json", "tb"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    events = list((run / "tb").glob("events.out.tfevents.*"))  # <time>.<host>.<pid>.<n>: fit, then test
    assert events and len({e.name.split(".")[-2] for e in events}) == 1  # one process wrote them
    assert not list(tmp.rglob("lightning_logs"))
    assert (run / "split.json").read_text() == (tmp / "single" / "split.json").read_text()

    # calibration: each of the 11 calibration structures scored once, as in the single process
    cal, ref = (json.loads((d / "calibrator.json").read_text())["scores"] for d in (run, tmp / "single"))
    assert len(cal) == len(ref) == 11
    assert cal == pytest.approx(ref, rel=RTOL)
