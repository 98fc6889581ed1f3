"""``train(cfg)``: a plain function that builds data, model and trainer from a config dict and fits.

The CLI (``sciml fit``) is a thin shell around this function, which tests and notebooks call directly.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from sciml.io.atomic import atomic_write_text
from sciml.io.checkpoint import AtomicCheckpointIO
from sciml.tasks import build_task
from sciml.uq.callback import ConformalCallback

log = logging.getLogger(__name__)

TRAINER_DEFAULTS = {"max_epochs": 100, "accelerator": "auto", "devices": 1, "log_every_n_steps": 10,
                    "deterministic": False}


def resolve_ckpt_path(run_dir: Path, ckpt_path: str | None) -> str | None:
    """Resolve ``--ckpt_path``: an explicit path, ``"last"``, or (when omitted) an existing ``last.ckpt``."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if ckpt_path in (None, "last"):
        if last.exists():
            return str(last)
        if ckpt_path == "last":
            raise FileNotFoundError(f"--ckpt_path last: no {last} yet (start without --ckpt_path)")
        return None
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
    return ckpt_path


def build_trainer(cfg: dict, run_dir: Path) -> L.Trainer:
    """Trainer with CSV + TensorBoard logs, best/last checkpoints and the conformal callback."""
    calib = cfg.get("calibration", {})
    checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best", monitor="val_mae",
                                 mode="min", save_last=True, enable_version_counter=False)
    callbacks = [checkpoint, LearningRateMonitor(),
                 ConformalCallback(str(run_dir), calib.get("score", "absolute"), calib.get("alpha", 0.1))]
    loggers = [CSVLogger(run_dir, name="logs", version=""), TensorBoardLogger(run_dir, name="tb", version="")]
    kwargs = TRAINER_DEFAULTS | cfg.get("trainer", {})
    return L.Trainer(default_root_dir=run_dir, callbacks=callbacks, logger=loggers,
                     plugins=[AtomicCheckpointIO()], **kwargs)


def train(cfg: dict, ckpt_path: str | None = None, test: bool = True) -> dict:
    """Fit the task described by ``cfg``; return the final metrics.

    Parameters
    ----------
    cfg : dict
        Resolved config: ``task``, ``seed``, ``run_dir``, ``threads``, ``data``, ``model``, ``trainer``,
        ``calibration`` (see ``configs/``).
    ckpt_path : str or None
        Resume from this Lightning checkpoint, ``"last"``, or ``None`` (resume from ``last.ckpt`` in the run
        directory when it exists, else start fresh).
    test : bool
        Evaluate the best checkpoint on the test split after fitting.

    """
    cfg = copy.deepcopy(cfg)
    run_dir = Path(cfg.get("run_dir", "runs/default"))
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    L.seed_everything(int(cfg.get("seed", 0)), workers=True)
    resume = resolve_ckpt_path(run_dir, ckpt_path)
    import yaml

    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    datamodule, module = build_task(cfg, run_dir)
    trainer = build_trainer(cfg, run_dir)
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
    datamodule, module = build_task(cfg, run_dir)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, plugins=[AtomicCheckpointIO()],
                        **{k: v for k, v in (TRAINER_DEFAULTS | cfg.get("trainer", {})).items() if k != "max_epochs"})
    run = trainer.validate if stage == "validate" else trainer.test
    results = run(module, datamodule=datamodule, ckpt_path=resolve_ckpt_path(run_dir, ckpt_path), weights_only=True)
    return results[0] if results else {}
