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
import os
import random
import signal
import subprocess
import threading
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.plugins.layer_sync import LayerSync
from torch import nn

from sciml.io.atomic import atomic_write_text
from sciml.io.checkpoint import AtomicCheckpointIO
from sciml.tasks import build_task
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


class RNGStateCallback(L.Callback):
    """Store the global torch / numpy / Python RNG states in checkpoints and restore them on resume.

    Lightning does not save RNG states; without them a resumed run reshuffles its training data
    differently from an uninterrupted run with the same seed. States are plain tensors, ints and tuples, so
    checkpoints still load with ``weights_only=True``. Under DDP rank 0's state is saved and restored on
    every rank (all ranks are seeded alike and ``DistributedSampler`` shuffles by seed and epoch).
    """

    def state_dict(self) -> dict:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        state = {"torch": torch.get_rng_state(), "python": random.getstate(),
                 "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        torch.set_rng_state(state_dict["torch"])
        random.setstate(state_dict["python"])
        name, keys, pos, has_gauss, gauss = state_dict["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


class SlurmRequeue(L.Callback):
    """On SLURM's pre-timeout signal, save ``<run_dir>/hpc_ckpt_<n>.ckpt`` and ``scontrol requeue`` the job.

    Lightning's own auto-requeue (``SLURMEnvironment(auto_requeue=True)``) saves the checkpoint inside the
    signal handler, which runs between any two Python bytecodes of the main thread: it can hang on a lock
    the interrupted code holds (Lightning issue #21406; seen here once in ~40 tiny runs, under load) or save
    the middle of an optimiser step. Here the handler only sets a flag; at the next training-batch end the
    ranks agree (any rank flagged), all take part in saving the checkpoint, and global rank 0 requeues.
    Training then goes on until SLURM's SIGTERM stops it (``sciml fit`` exits 143); under DDP the SIGTERM
    handler too only sets a flag, and all ranks stop after the same batch once any rank has it.

    Parameters
    ----------
    run_dir : str or Path
        Where ``hpc_ckpt_<n>.ckpt`` goes (Lightning's name and place, so plain Lightning finds it too).
    signum : signal.Signals
        The signal ``#SBATCH --signal`` sends.

    """

    def __init__(self, run_dir: str | Path, signum: signal.Signals = signal.SIGUSR1) -> None:
        self.run_dir, self.signum = Path(run_dir), signum
        self.requested = self.sigterm = False
        self._previous = None

    def _on_signal(self, signum, frame) -> None:
        self.requested = True  # nothing else: a signal handler may interrupt any code

    def _on_sigterm(self, signum, frame) -> None:
        self.sigterm = True

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._on_signal)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # under DDP, Lightning's SIGTERM handler broadcasts from inside the handler (a collective at a random
        # point) and each rank stops at the first batch end after its own signal, so ranks that got SIGTERM a
        # moment apart stop at different batches and the others fail or hang; here the ranks agree first
        # (Lightning's teardown restores the previous handler)
        if trainer.world_size > 1 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous)
            self._previous = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        flags = torch.tensor([float(self.requested), float(self.sigterm)], device=pl_module.device)
        requested, sigterm = (trainer.strategy.reduce(flags, reduce_op="sum") > 0).tolist()  # any rank
        if requested:
            self.requested = False
            numbers = [int(p.stem[len("hpc_ckpt_"):]) for p in self.run_dir.glob("hpc_ckpt_*.ckpt")
                       if p.stem[len("hpc_ckpt_"):].isdigit()]
            path = self.run_dir / f"hpc_ckpt_{max(numbers, default=0) + 1}.ckpt"
            trainer.save_checkpoint(path)
            if trainer.is_global_zero:
                self.requeue(path)
        if sigterm:  # every rank, after the same batch: Lightning's loop then stops them all (SIGTERMException)
            trainer._signal_connector.received_sigterm = True

    @staticmethod
    def requeue(path: Path) -> None:
        """Run ``scontrol requeue`` for this job (array-aware); warn instead of failing."""
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if array else os.environ.get("SLURM_JOB_ID")
        try:
            done = subprocess.run(["scontrol", "requeue", str(job)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("saved %s but could not requeue SLURM job %s (%s); resubmit the same command", path, job, err)
            return
        if done.returncode:
            log.warning("saved %s but `scontrol requeue %s` failed: %s", path, job, done.stderr.strip())
        else:
            log.warning("saved %s and requeued SLURM job %s", path, job)


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks.

    The backward all-reduces the gradient too, since every rank's loss depends on the sum.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        torch.distributed.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        torch.distributed.all_reduce(grad)
        return grad


class _GlooSyncMixin:
    """Forward of a batch norm whose training statistics are all-reduced over the default process group.

    Two passes, differentiable through :class:`_AllReduceSum` (as in ``torch.nn.SyncBatchNorm``, gradients
    flow to every rank's inputs): ``μ = Σx / n`` and ``σ² = Σ(x − μ)² / n`` over the batch (and spatial)
    dimensions of all ranks; running statistics are updated with the unbiased ``σ² n / (n − 1)`` as in
    ``torch.nn.BatchNorm*``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        all_reduce = _AllReduceSum.apply
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        self._check_input_dim(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        count = all_reduce(x.new_tensor([x.numel() / x.shape[1]]))
        mean = all_reduce(x.sum(dims)) / count
        var = all_reduce(((x - mean.view(shape)) ** 2).sum(dims)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.lerp_(mean.detach(), factor)
                self.running_var.lerp_(var.detach() * count / (count - 1).clamp(min=1), factor)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        return y * self.weight.view(shape) + self.bias.view(shape) if self.affine else y


class GlooSyncBatchNorm(LayerSync):
    """Lightning layer-sync plugin: synchronised batch norm on any device, including CPU with gloo.

    ``apply`` swaps the class of every ``nn.BatchNorm1d/2d/3d`` for a subclass with a synchronised training
    forward (parameters and buffers stay in place, so ``state_dict`` keys are unchanged); ``revert`` swaps
    the original class back.
    """

    _classes: dict[type, type] = {}

    @classmethod
    def _sync_class(cls, base: type) -> type:
        if base not in cls._classes:  # registered in this module so that swapped modules still pickle
            name = f"GlooSync{base.__name__}"
            cls._classes[base] = globals()[name] = type(name, (_GlooSyncMixin, base),
                                                        {"_sciml_base": base, "__module__": __name__})
        return cls._classes[base]

    def apply(self, model: nn.Module) -> nn.Module:
        for module in model.modules():
            if type(module) in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
                module.__class__ = self._sync_class(type(module))
        return model

    def revert(self, model: nn.Module) -> nn.Module:
        for module in model.modules():
            if isinstance(module, _GlooSyncMixin):
                module.__class__ = module._sciml_base
        return model


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
    callbacks = [best, last, LearningRateMonitor(), RNGStateCallback(),
                 ConformalCallback(str(run_dir), calib.get("score", "absolute"), calib.get("alpha", 0.1))]
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
