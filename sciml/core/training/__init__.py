"""Training infrastructure shared by every family: RNG state in checkpoints, SLURM requeue, CPU sync BN, epoch times."""

from __future__ import annotations

from sciml.core.training.rng import RNGStateCallback
from sciml.core.training.slurm import SlurmRequeue
from sciml.core.training.sync_batchnorm import GlooSyncBatchNorm
from sciml.core.training.timer import EpochTimer

__all__ = ["EpochTimer", "GlooSyncBatchNorm", "RNGStateCallback", "SlurmRequeue"]
