"""Data-module base shared by every task: the four splits of docs/design.md §3 as Lightning loaders."""

from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader


class SplitDataModule(L.LightningDataModule):
    """A ``LightningDataModule`` whose loaders (``sciml.core.splits.SPLIT_NAMES``) come from one method, :meth:`loader`.

    Subclasses implement ``loader(split, shuffle)``; the training loader is shuffled (Lightning adds a
    ``DistributedSampler`` under DDP), the others are not. ``calib_dataloader`` feeds the conformal callback and
    export only.
    """

    def loader(self, split: str, shuffle: bool = False) -> DataLoader:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        """Shuffled training loader."""
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Validation loader (early stopping and model selection only)."""
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        """Held-out test loader."""
        return self.loader("test")

    def calib_dataloader(self) -> DataLoader:
        """Calibration loader (conformal scores only; never used for model selection)."""
        return self.loader("calib")
