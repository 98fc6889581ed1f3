"""Lightning checkpoint I/O that writes atomically and loads without unpickling code."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from sciml.core.io.artifact import ArtifactError
from sciml.core.io.atomic import atomic_write_bytes


def load_lightning_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """Load a ``.ckpt`` with ``weights_only=True`` (never runs code hidden in the file)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    if path.stat().st_size == 0:
        raise ArtifactError(f"{path}: empty checkpoint file; point to a checkpoint written by sciml fit")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise ArtifactError(f"{path}: refused to load, the checkpoint contains objects other than tensors and "
                            f"plain data ({str(err).splitlines()[0][:120]}); only load checkpoints you trust "
                            "with trusted tools") from None
    except (RuntimeError, EOFError, OSError, ValueError, IndexError, KeyError) as err:
        reason = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        raise ArtifactError(f"{path}: corrupted or truncated checkpoint ({reason})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ArtifactError(f"{path}: not a Lightning checkpoint (no 'state_dict'); point to a checkpoint "
                            "written by sciml fit")
    return checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """Save checkpoints via temp file + fsync + rename; load with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getvalue())

    def load_checkpoint(self, path: _PATH, map_location: Any = None, weights_only: bool | None = True) -> dict:
        return load_lightning_checkpoint(path, map_location=map_location or "cpu")
