"""Training infrastructure shared by every family.

RNG state in checkpoints, SLURM requeue, CPU sync BN, epoch times, a metrics log continued across resumes.
"""

from __future__ import annotations

from sciml.core.training.csv_log import ResumableCSVLogger
from sciml.core.training.rng import RNGStateCallback
from sciml.core.training.slurm import SlurmRequeue
from sciml.core.training.sync_batchnorm import GlooSyncBatchNorm
from sciml.core.training.timer import EpochTimer

__all__ = ["EpochTimer", "GlooSyncBatchNorm", "RNGStateCallback", "ResumableCSVLogger", "SlurmRequeue"]
