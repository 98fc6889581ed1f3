"""Faults a long run meets on a cluster: ``kill -9``, the SLURM pre-timeout signal, a writer killed mid-write.

Each fit runs ``sciml fit`` in a subprocess on the tiny config (48 training structures, batch 16: 3 shuffled
optimiser steps per epoch) with ``--trainer.deterministic true`` and a constant learning rate.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sciml.core.train import build_trainer, train

from .conftest import ROOT, sciml_command

KILL_EPOCHS = 40


def fit_command(config: Path, run: Path, epochs: int) -> list[str]:
    return [*sciml_command(), "fit", "--config", str(config), "--run_dir", str(run), "--trainer.max_epochs",
            str(epochs), "--trainer.deterministic", "true", "--model.optim.scheduler", "none"]


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _kill_leftovers():
    """A failed assertion must not leave fits running: kill what this test started and is still alive."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=env, stdout=open(log.with_suffix(".out"), "w"),
                            stderr=open(log.with_suffix(".err"), "w"))
    _STARTED.append(proc)
    return proc


def finish(cmd: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def metrics_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.rindex("{"):])


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def wait_until(condition, proc: subprocess.Popen, timeout: float = 120, what: str = "") -> None:
    """Poll ``condition()`` every 20 ms; fail if ``proc`` ends first or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the fit ended (rc={proc.returncode}) before {what}; make the run longer")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def epoch_of(path: Path) -> int:
    try:
        return int(load(path)["epoch"]) if path.is_file() else -1
    except (RuntimeError, EOFError):  # replaced between is_file and load
        return -1


def test_kill9_then_rerun_resumes_and_matches_uninterrupted(tiny_data, clean_env):
    """``kill -9`` after the epoch-2 checkpoint, rerun the same command: same weights and metrics as a run
    that was never interrupted.

    ``last.ckpt`` is written every epoch and atomically, so the newest complete epoch survives the kill and
    at most the epoch in progress (one checkpoint interval) is recomputed; the rerun resumes from it (its first
    line says so, and how to start fresh), and ends at the same global step with identical weights.

    Tolerance: exact equality of the final weights and metrics. Resuming restores model, optimiser, loop
    counters and (``RNGStateCallback``) the RNG states, so the resumed epochs draw the same shuffles and the
    float32 arithmetic is the same sequence of operations (deterministic mode, one thread).
    """
    tmp, config = tiny_data["tmp"], tiny_data["config"]
    reference = finish(fit_command(config, tmp / "reference", KILL_EPOCHS), clean_env)
    assert reference.returncode == 0, reference.stderr[-3000:]

    run = tmp / "run"
    last = run / "checkpoints" / "last.ckpt"
    cmd = fit_command(config, run, KILL_EPOCHS)
    proc = start(cmd, clean_env, tmp / "killed")
    wait_until(lambda: epoch_of(last) >= 2, proc, what="the epoch-2 checkpoint")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    killed_at = load(last)  # a kill -9 never leaves a partial last.ckpt (atomic rename)
    assert 2 <= killed_at["epoch"] < KILL_EPOCHS - 1

    resumed = finish(cmd, clean_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.splitlines()[0].startswith(f"resuming from {last} (to start fresh: --fresh")
    final, ref_final = load(last), load(tmp / "reference" / "checkpoints" / "last.ckpt")
    assert final["global_step"] == ref_final["global_step"] == 3 * KILL_EPOCHS
    for key, value in ref_final["state_dict"].items():
        assert torch.equal(final["state_dict"][key], value), key
    ours, ref = metrics_of(resumed.stdout), metrics_of(reference.stdout)
    for key in ("val_mae", "test_mae"):
        assert ours[key] == ref[key], key
    assert val_history(run) == val_history(tmp / "reference")  # metrics.csv: every epoch once, none lost


def val_history(run: Path) -> list[tuple[int, str]]:
    """``(epoch, val_mae)`` rows of a run's ``logs/metrics.csv``, in order."""
    with open(run / "logs" / "metrics.csv", newline="") as file:
        return [(int(row["epoch"]), row["val_mae"]) for row in csv.DictReader(file) if row.get("val_mae")]


def test_every_n_train_steps_refreshes_last_checkpoint_within_an_epoch(tiny_data):
    """``checkpoint.every_n_train_steps`` bounds the work a kill can lose to that many optimiser steps."""
    import yaml

    cfg = yaml.safe_load(Path(tiny_data["config"]).read_text())
    cfg["checkpoint"] = {"every_n_train_steps": 1}
    cfg["trainer"] |= {"max_epochs": 1, "max_steps": 2}  # stops inside the first epoch (3 steps)
    train(cfg, test=False)
    last = Path(cfg["run_dir"]) / "checkpoints" / "last.ckpt"
    assert load(last)["global_step"] == 2
    assert not (last.parent / "best.ckpt").exists()  # no validation ran: only the step checkpoint exists
    every = [cb._every_n_train_steps for cb in build_trainer(cfg, Path(cfg["run_dir"])).checkpoint_callbacks]
    assert every == [0, 1]  # best.ckpt on validation, last.ckpt every step


def fake_slurm(tmp: Path, env: dict, ntasks: int = 1) -> tuple[dict, Path]:
    """SLURM's variables for a one-node job of ``ntasks`` tasks (task 0's), and an ``scontrol`` on PATH that
    records its arguments."""
    bin_dir, calls = tmp / "bin", tmp / "scontrol.calls"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "sciml-test", "SLURM_NTASKS": str(ntasks),
             "SLURM_NTASKS_PER_NODE": str(ntasks), "SLURM_NNODES": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost"}
    return env | slurm | {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}, calls


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def test_sigusr1_saves_checkpoint_requeues_and_rerun_resumes(tiny_data, clean_env):
    """The SLURM pre-timeout path without SLURM, for a 2-task DDP job started the way ``srun`` does (one
    process per task with SLURM_PROCID/SLURM_LOCALID): SIGUSR1 to both tasks → one ``hpc_ckpt_1.ckpt``
    saved between batches and one ``scontrol requeue``; the SIGTERM SLURM then sends stops both ranks at
    the same batch with exit code 143 (no hang); the requeued command resumes and finishes."""
    tmp, config = tiny_data["tmp"], tiny_data["config"]
    env, calls = fake_slurm(tmp, clean_env, ntasks=2)
    env["MASTER_PORT"] = free_port()
    run, epochs = tmp / "run", 30
    cmd = [*fit_command(config, run, epochs), "--trainer.strategy", "ddp", "--trainer.devices", "2",
           "--trainer.accelerator", "cpu", "--data.batch_size", "8"]  # global batch 16: 3 steps per epoch
    tasks = [env | {"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)} for r in (0, 1)]
    procs = [start(cmd, task, tmp / f"rank{r}") for r, task in enumerate(tasks)]
    wait_until(lambda: (run / "checkpoints" / "last.ckpt").is_file(), procs[0], what="the first checkpoint")
    for proc in procs:
        proc.send_signal(signal.SIGUSR1)
    hpc = run / "hpc_ckpt_1.ckpt"
    wait_until(lambda: hpc.is_file() and calls.is_file(), procs[0], what="the requeue checkpoint and scontrol")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=60) for proc in procs] == [143, 143]
    assert "requeued SLURM job 4242" in (tmp / "rank0.err").read_text()
    assert all("stopped by SIGTERM" in (tmp / f"rank{r}.err").read_text() for r in (0, 1))
    assert calls.read_text().split() == ["requeue", "4242"]
    saved = load(hpc)
    assert {"state_dict", "optimizer_states", "epoch", "global_step"} <= set(saved)
    progress = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress["processed"] == progress["started"]  # saved between batches, not inside a step
    assert saved["global_step"] >= 3  # at least one epoch of progress is in the requeue checkpoint

    procs = [start(cmd, task, tmp / f"requeued{r}") for r, task in enumerate(tasks)]
    assert [proc.wait(timeout=300) for proc in procs] == [0, 0], (tmp / "requeued0.err").read_text()[-3000:]
    assert "resuming from" in (tmp / "requeued0.err").read_text()
    assert (tmp / "requeued0.out").read_text().count('"val_mae"') == 1  # metrics from rank 0 only
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 3 * epochs
    assert calls.read_text().split() == ["requeue", "4242"]  # no second requeue


WRITER = """
import sys, time
from sciml.core.io.atomic import atomic_open
path, mode = sys.argv[1], sys.argv[2]
with (open(path, "w") if mode == "plain" else atomic_open(path, "w")) as f:
    f.write("id,value\\n")
    for chunk in range(10_000):
        f.write("".join(f"{i},{i * 0.5}\\n" for i in range(chunk * 10_000, (chunk + 1) * 10_000)))
        f.flush()
        if chunk == 20:
            print("writing", flush=True)
        if chunk >= 20:
            time.sleep(0.01)
"""


@pytest.mark.parametrize("mode", ["atomic", "plain"])
def test_kill_during_write_keeps_previous_file(tmp_path, mode):
    """SIGKILL a writer of a large CSV mid-write: ``atomic_open`` leaves the previous file intact (a plain
    ``open`` is the control: it has already truncated and partly rewritten it)."""
    target = tmp_path / "preds.csv"
    target.write_text("id,value\n0,previous\n")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target), mode], stdout=subprocess.PIPE, text=True)
    _STARTED.append(proc)
    assert proc.stdout.readline().strip() == "writing"
    if mode == "atomic":
        (tmp,) = tmp_path.glob(".preds.csv.*.tmp")
        assert tmp.stat().st_size > 1_000_000  # megabytes of the new file are on disk, in the temp sibling
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    if mode == "atomic":
        assert target.read_text() == "id,value\n0,previous\n"
    else:
        assert target.read_text() != "id,value\n0,previous\n"


def test_sbatch_template_runs_under_a_fake_srun(tiny_data, clean_env):
    """``configs/slurm/train.sbatch`` run by bash as a one-task job, ``srun`` replaced by ``exec``: the
    command it builds (DDP, devices/nodes from SLURM's variables) fits and writes the run folder."""
    tmp, config = tiny_data["tmp"], tiny_data["config"]
    env, _ = fake_slurm(tmp, clean_env)
    srun = tmp / "bin" / "srun"
    srun.write_text('#!/bin/sh\nshift\nexec "$@"\n')  # drop --kill-on-bad-exit=1, run the one task
    srun.chmod(0o755)
    env |= {"PATH": f"{Path(sciml_command()[0]).parent}{os.pathsep}{env['PATH']}", "ACCELERATOR": "cpu",
            "RUN_DIR": str(tmp / "run"), "SLURM_CPUS_PER_TASK": "1"}
    if Path(sciml_command()[0]).name != "sciml":
        pytest.skip("the sciml console script is not installed")
    done = finish(["bash", str(ROOT / "configs" / "slurm" / "train.sbatch"), str(config), "--trainer.max_epochs",
                   "1"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "job 4242 restart 0" in done.stdout
    assert "distributed_backend=gloo" in done.stderr
    assert (tmp / "run" / "checkpoints" / "last.ckpt").is_file() and (tmp / "run" / "calibrator.json").is_file()
