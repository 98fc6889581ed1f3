"""SLURM pre-timeout requeue, outside the signal handler."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

import lightning as L
import torch

log = logging.getLogger(__name__)


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
