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
  checkpoint continues with the shuffles and dropout masks of an uninterrupted run.
"""

from __future__ import annotations

import copy
import logging
import signal
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checkpoint import AtomicCheckpointIO
from sciml.core.registry import build_task
from sciml.core.training import GlooSyncBatchNorm, RNGStateCallback, SlurmRequeue
from sciml.uq.callback import ConformalCallback

log = logging.getLogger(__name__)

TRAINER_DEFAULTS = {"max_epochs": 100, "accelerator": "auto", "devices": 1, "log_every_n_steps": 10,
                    "deterministic": False}


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


def _on_cpu(accelerator: str) -> bool:
    return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())


def build_trainer(cfg: dict, run_dir: Path) -> L.Trainer:
    """Trainer with logs, checkpoints, RNG states in checkpoints, and the conformal callback.

    Writes CSV + TensorBoard logs, ``best.ckpt`` (lowest ``val_mae``) and ``last.ckpt`` (every epoch).
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
    callbacks = [best, last, LearningRateMonitor(), RNGStateCallback()]
    if calib.get("callback", True):  # false for tasks calibrated at export (perturbation effects: sciml.perturbation)
        callbacks.append(ConformalCallback(str(run_dir), calib.get("score", "absolute"), calib.get("alpha", 0.1),
                                           calibration=calib))
    if on_slurm and slurm.get("auto_requeue", True):
        callbacks.append(SlurmRequeue(run_dir, requeue_signal))
    loggers = [CSVLogger(run_dir, name="logs", version=""), TensorBoardLogger(run_dir, name="tb", version="")]
    return L.Trainer(default_root_dir=run_dir, callbacks=callbacks, logger=loggers, plugins=plugins, **kwargs)


def train(cfg: dict, ckpt_path: str | None = None, test: bool = True) -> dict:
    """Fit the task described by ``cfg``; return the final metrics.

    Every process of a distributed run calls this with the same ``cfg``; only global rank 0 writes files.

    Parameters
    ----------
    cfg : dict
        Resolved config: ``task``, ``seed``, ``run_dir``, ``threads``, ``data``, ``model``, ``trainer``,
        ``calibration``, optional ``checkpoint`` and ``slurm`` (see ``configs/`` and :func:`build_trainer`).
    ckpt_path : str or None
        Resume from this Lightning checkpoint, ``"last"``, or ``None`` (resume from the newest of
        ``last.ckpt`` and SLURM's ``hpc_ckpt_<n>.ckpt`` in the run directory when one exists, else start
        fresh).
    test : bool
        Evaluate the best checkpoint on the test split after fitting.

    """
    cfg = copy.deepcopy(cfg)
    run_dir = Path(cfg.get("run_dir", "runs/default"))
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    trainer = build_trainer(cfg, run_dir)  # knows this process's global rank before anything is written
    L.seed_everything(int(cfg.get("seed", 0)), workers=True)
    resume = resolve_ckpt_path(run_dir, ckpt_path)
    if trainer.is_global_zero:
        import yaml

        atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    datamodule, module = build_task(cfg, run_dir if trainer.is_global_zero else None)
    if resume:
        log.warning("resuming from %s", resume)
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
    run_dir = Path(cfg.get("run_dir", "runs/default"))
    datamodule, module = build_task(cfg, None)  # the run's split.json belongs to fit; not rewritten here
    trainer = L.Trainer(logger=False, enable_checkpointing=False, plugins=[AtomicCheckpointIO()],
                        **{k: v for k, v in (TRAINER_DEFAULTS | cfg.get("trainer", {})).items() if k != "max_epochs"})
    run = trainer.validate if stage == "validate" else trainer.test
    results = run(module, datamodule=datamodule, ckpt_path=resolve_ckpt_path(run_dir, ckpt_path), weights_only=True)
    return results[0] if results else {}
