"""Wall time of every training epoch, logged beside the losses."""

from __future__ import annotations

import time

import lightning as L


class EpochTimer(L.Callback):
    """Log ``train_epoch_seconds``: wall seconds from the start to the end of each training epoch.

    The validation pass that Lightning runs at the end of an epoch is not included. The value lands in the run's
    ``logs/metrics.csv`` (and TensorBoard), so the time per epoch of a run, and how it changes when the machine
    is shared, can be read from the run itself.
    """

    def __init__(self) -> None:
        self._start: float | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._start is not None:
            pl_module.log("train_epoch_seconds", time.perf_counter() - self._start, on_step=False, on_epoch=True)
            self._start = None
