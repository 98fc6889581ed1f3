"""``export``: turn a Lightning checkpoint into a calibrated, self-describing artifact (docs/design.md §4).

The family-independent part: find the run's config, load the checkpoint safely, hand both to the family's
``export`` module (:func:`sciml.core.registry.family`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.registry import family


def find_run_config(ckpt: Path) -> dict:
    """The ``config.yaml`` a run wrote next to its ``checkpoints/`` folder."""
    for folder in (ckpt.parent, ckpt.parent.parent):
        if (folder / "config.yaml").is_file():
            return yaml.safe_load((folder / "config.yaml").read_text())
    raise FileNotFoundError(f"{ckpt}: no config.yaml in the run folder; pass --config")


def load_run(ckpt: str | Path, config: dict | None = None) -> tuple[dict, dict]:
    """The checkpoint's state (loaded with ``weights_only=True``) and its run config (``config`` or the run's own)."""
    ckpt = Path(ckpt)
    state = load_lightning_checkpoint(ckpt)
    return state, config or find_run_config(ckpt)


def export(ckpt: str | Path, output: str | Path, calibrate: bool = True, alpha: float = 0.1,
           config: dict | None = None, score: str | None = None) -> dict:
    """Export the checkpoint ``ckpt`` to the artifact folder ``output``; return the measured metrics."""
    state, cfg = load_run(ckpt, config)
    return family(cfg, "export").export(Path(ckpt), state, output, cfg, calibrate, alpha, score)
