"""Training infrastructure shared by every family: RNG state in checkpoints, SLURM requeue, CPU sync BN."""

from __future__ import annotations

from sciml.training.rng import RNGStateCallback
from sciml.training.slurm import SlurmRequeue
from sciml.training.sync_batchnorm import GlooSyncBatchNorm

__all__ = ["GlooSyncBatchNorm", "RNGStateCallback", "SlurmRequeue"]
