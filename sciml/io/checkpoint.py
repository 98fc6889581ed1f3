"""Lightning checkpoint I/O that writes atomically and loads without unpickling code."""

from __future__ import annotations

import io
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from sciml.io.atomic import atomic_write_bytes


class AtomicCheckpointIO(TorchCheckpointIO):
    """Save checkpoints via temp file + fsync + rename; load with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getvalue())

    def load_checkpoint(self, path: _PATH, map_location: Any = None, weights_only: bool | None = True) -> dict:
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)
