"""Training infrastructure shared by every family: RNG state in checkpoints, SLURM requeue, CPU sync BN."""

from __future__ import annotations

from sciml.core.training.rng import RNGStateCallback
from sciml.core.training.slurm import SlurmRequeue
from sciml.core.training.sync_batchnorm import GlooSyncBatchNorm

__all__ = ["GlooSyncBatchNorm", "RNGStateCallback", "SlurmRequeue"]
