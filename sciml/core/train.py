"""``train(cfg)``: a plain function that builds data, model and trainer from a config dict and fits.

The CLI (``sciml fit``) is a thin shell around this function, which tests and notebooks call directly.

Distributed and cluster runs (``docs/cluster.md``):

- every process of a DDP run (Lightning's subprocess launcher, or one ``srun`` task per device) calls
  ``train`` with the same config; only global rank 0 writes ``config.yaml``, ``split.json``,
  ``calibrator.json``, checkpoints and logs, so a run has one run directory;
- under DDP, batch-norm statistics are synchronised across ranks by default (``trainer.sync_batchnorm``),
  so N processes with batch ``b`` each train like one process with batch ``N·b``; on CPU (gloo) this uses
  :class:`GlooSyncBatchNorm`, since ``torch.nn.SyncBatchNorm`` runs on GPUs only;
- on SLURM, :class:`SlurmRequeue` saves ``hpc_ckpt_<n>.ckpt`` and requeues the job on the pre-timeout
  signal (at the next batch end, not inside the signal handler); ``fit`` resumes from the newest of
  ``last.ckpt`` and those;
- checkpoints carry the global RNG states (:class:`RNGStateCallback`), so resuming from an epoch-end
  checkpoint continues with the shuffles and dropout masks of an uninterrupted run;
- ``logs/metrics.csv`` records each epoch's training wall time as ``train_epoch_seconds`` (:class:`EpochTimer`);
  a resumed run keeps the rows up to its checkpoint and appends (:class:`ResumableCSVLogger`).

Before anything is written the config is checked against its schema (:func:`sciml.core.config.check_config`:
unknown keys, ``trainer`` keys sciml sets itself, a missing data file). A run folder that holds checkpoints is
resumed, and the first line printed says so; ``fresh=True`` (``sciml fit --fresh``) removes the previous run's
outputs and starts over. Threads follow :func:`sciml.core.config.resolve_threads`: ``OMP_NUM_THREADS``, when
set, wins over the config's ``threads``; the number used is recorded in ``config.yaml``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from sciml.core.config import TRAINER_DEFAULTS, check_config, resolve_threads
from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checkpoint import AtomicCheckpointIO, load_lightning_checkpoint
from sciml.core.registry import build_task
from sciml.core.training import EpochTimer, GlooSyncBatchNorm, ResumableCSVLogger, RNGStateCallback, SlurmRequeue
from sciml.core.training.conformal import ConformalCallback
from sciml.core.training.init import init_weights

RUN_OUTPUTS = ("checkpoints", "logs", "tb", "config.yaml", "split.json", "calibrator.json", "hpc_ckpt_*.ckpt")
"""What ``fit`` writes into a run folder (and ``fresh`` removes)."""


def resolve_ckpt_path(run_dir: Path, ckpt_path: str | None) -> str | None:
    """Resolve ``--ckpt_path``: an explicit path, ``"last"``, or (when omitted) the newest resumable checkpoint.

    Resumable checkpoints are ``<run_dir>/checkpoints/last.ckpt`` and the ``<run_dir>/hpc_ckpt_<n>.ckpt``
    files Lightning writes on the SLURM pre-timeout signal; the newest (by modification time) wins.
    """
    run_dir = Path(run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    if ckpt_path in (None, "last"):
        candidates = [p for p in (last, *run_dir.glob("hpc_ckpt_*.ckpt")) if p.is_file()]
        if candidates:
            return str(max(candidates, key=lambda p: p.stat().st_mtime_ns))
        if ckpt_path == "last":
            raise FileNotFoundError(f"--ckpt_path last: no {last} yet (start without --ckpt_path)")
        return None
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
    return ckpt_path


def remove_run_outputs(run_dir: Path) -> list[Path]:
    """Delete the :data:`RUN_OUTPUTS` of a previous run in ``run_dir`` (nothing else); return what was removed."""
    removed = [p for pattern in RUN_OUTPUTS for p in sorted(Path(run_dir).glob(pattern))]
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return removed


def _on_cpu(accelerator: str) -> bool:
    return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())


def build_trainer(cfg: dict, run_dir: Path, resume_step: int | None = None) -> L.Trainer:
    """Trainer with logs, checkpoints, RNG states in checkpoints, and the conformal callback.

    Writes CSV (continued after ``resume_step``, the resumed checkpoint's global step) + TensorBoard logs,
    ``best.ckpt`` (lowest ``val_mae``) and ``last.ckpt`` (every epoch).
    Config sections read here: ``trainer`` (``L.Trainer`` keywords over :data:`TRAINER_DEFAULTS`),
    ``checkpoint`` (``every_n_train_steps``: write ``last.ckpt`` every that many optimiser steps instead of
    every epoch, to bound the work a kill can lose when epochs are long), ``slurm`` (``auto_requeue``,
    default ``true``; ``requeue_signal``, default ``SIGUSR1``) and ``calibration``.
    """
    calib = cfg.get("calibration", {})
    kwargs = TRAINER_DEFAULTS | cfg.get("trainer", {})
    plugins: list = [AtomicCheckpointIO()]
    if str(kwargs.get("strategy", "")).startswith("ddp"):
        kwargs.setdefault("sync_batchnorm", True)
        if kwargs["sync_batchnorm"] and _on_cpu(str(kwargs.get("accelerator", "auto"))):
            kwargs["sync_batchnorm"] = False  # Lightning's flag means torch.nn.SyncBatchNorm (GPU only)
            plugins.append(GlooSyncBatchNorm())
    slurm = cfg.get("slurm") or {}
    requeue_signal = getattr(signal, slurm.get("requeue_signal", "SIGUSR1"))
    on_slurm = SLURMEnvironment.detect()
    if on_slurm:  # ranks from SLURM; Lightning's in-handler requeue off, SlurmRequeue does it (see there)
        plugins.append(SLURMEnvironment(auto_requeue=False, requeue_signal=requeue_signal))
    # best.ckpt (model selection) and last.ckpt (resume) are separate callbacks: Lightning's save_last only
    # writes last.ckpt when the monitored metric improves, which would lose every epoch since the best one
    every = (cfg.get("checkpoint") or {}).get("every_n_train_steps")
    best = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best", monitor="val_mae", mode="min",
                           enable_version_counter=False)
    last = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="last", monitor=None, save_top_k=1,
                           every_n_train_steps=int(every) if every else None, enable_version_counter=False)
    callbacks = [best, last, LearningRateMonitor(), RNGStateCallback(), EpochTimer()]
    if calib.get("callback", True):  # false for tasks calibrated at export (perturbation effects: sciml.perturbation)
        callbacks.append(ConformalCallback(str(run_dir), calib.get("score", "absolute"), calib.get("alpha", 0.1),
                                           calibration=calib))
    if on_slurm and slurm.get("auto_requeue", True):
        callbacks.append(SlurmRequeue(run_dir, requeue_signal))
    loggers = [ResumableCSVLogger(run_dir, resume_step), TensorBoardLogger(run_dir, name="tb", version="")]
    return L.Trainer(default_root_dir=run_dir, callbacks=callbacks, logger=loggers, plugins=plugins, **kwargs)


def train(cfg: dict, ckpt_path: str | None = None, test: bool = True, fresh: bool = False) -> dict:
    """Fit the task described by ``cfg``; return the final metrics.

    Every process of a distributed run calls this with the same ``cfg``; only global rank 0 writes files.

    Parameters
    ----------
    cfg : dict
        Run config: ``task``, ``seed``, ``run_dir``, ``threads``, ``data``, ``model``, ``trainer``,
        ``calibration``, optional ``init_from`` (weights to start from: :mod:`sciml.core.training.init`),
        ``checkpoint`` and ``slurm`` (:mod:`sciml.core.config` lists every key).
    ckpt_path : str or None
        Resume from this Lightning checkpoint, ``"last"``, or ``None`` (resume from the newest of
        ``last.ckpt`` and SLURM's ``hpc_ckpt_<n>.ckpt`` in the run directory when one exists, else start
        fresh). Resuming is announced on the first line printed (stderr).
    test : bool
        Evaluate the best checkpoint on the test split after fitting.
    fresh : bool
        Remove the previous run's outputs in ``run_dir`` (:data:`RUN_OUTPUTS`) and start over; not with
        ``ckpt_path``. Not for job scripts that requeue: a requeued job would start over too.

    Raises
    ------
    sciml.core.config.ConfigError
        The config does not match the schema (nothing is written).
    FileNotFoundError
        ``data.path`` or ``ckpt_path`` does not exist (nothing is written).

    """
    cfg = check_config(cfg)  # before anything is written
    if fresh and ckpt_path:
        raise ValueError("--fresh starts over and --ckpt_path resumes: give one of them")
    run_dir = Path(cfg.get("run_dir", "runs/default"))
    resume = None if fresh else resolve_ckpt_path(run_dir, ckpt_path)
    rank_zero = rank_zero_only.rank == 0  # from the launcher's variables; the Trainer is not built yet
    if rank_zero and resume:
        print(f"resuming from {resume} (to start fresh: --fresh, or another --run_dir)", file=sys.stderr, flush=True)
    if rank_zero and fresh and (removed := remove_run_outputs(run_dir)):
        print(f"starting fresh in {run_dir}: removed {', '.join(p.name for p in removed)}", file=sys.stderr,
              flush=True)
    threads, origin = resolve_threads(cfg.get("threads"), os.environ)
    if rank_zero and origin == "OMP_NUM_THREADS" and cfg.get("threads") not in (None, threads):
        print(f"threads: OMP_NUM_THREADS={threads} wins over threads: {cfg['threads']} from the config",
              file=sys.stderr, flush=True)
    if threads:
        torch.set_num_threads(threads)
        cfg["threads"] = threads
    run_dir.mkdir(parents=True, exist_ok=True)
    resume_step = int(load_lightning_checkpoint(resume).get("global_step", 0)) if resume else None
    trainer = build_trainer(cfg, run_dir, resume_step)  # knows this process's global rank before anything is written
    L.seed_everything(int(cfg.get("seed", 0)), workers=True)
    datamodule, module = build_task(cfg, run_dir if trainer.is_global_zero else None)
    if cfg.get("init_from") and not resume:
        init_weights(module, cfg["init_from"])
    if trainer.is_global_zero:
        import yaml

        atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if test:
        results = trainer.test(module, datamodule=datamodule, ckpt_path="best", weights_only=True)
        metrics.update(results[0] if results else {})
    metrics["best_checkpoint"] = str(trainer.checkpoint_callback.best_model_path)
    return metrics


def evaluate(cfg: dict, ckpt_path: str | None, stage: str = "test") -> dict:
    """Run ``validate`` or ``test`` of the checkpoint ``ckpt_path`` (loaded with ``weights_only=True``)."""
    if not ckpt_path:
        raise ValueError(f"sciml {stage} needs --ckpt_path (e.g. runs/<run>/checkpoints/best.ckpt)")
    cfg = check_config(cfg)
    run_dir = Path(cfg.get("run_dir", "runs/default"))
    datamodule, module = build_task(cfg, None)  # the run's split.json belongs to fit; not rewritten here
    trainer = L.Trainer(logger=False, enable_checkpointing=False, plugins=[AtomicCheckpointIO()],
                        **{k: v for k, v in (TRAINER_DEFAULTS | cfg.get("trainer", {})).items() if k != "max_epochs"})
    run = trainer.validate if stage == "validate" else trainer.test
    results = run(module, datamodule=datamodule, ckpt_path=resolve_ckpt_path(run_dir, ckpt_path), weights_only=True)
    return results[0] if results else {}
