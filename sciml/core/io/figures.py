"""Write matplotlib figures atomically."""

from __future__ import annotations

import io
from pathlib import Path

from sciml.core.io.atomic import atomic_write_bytes


def save_png(fig, path: str | Path, dpi: int = 120) -> Path:
    """Render ``fig`` to PNG in memory, close it, and write ``path`` atomically (temp file + rename)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    path = Path(path)
    atomic_write_bytes(path, buffer.getvalue())
    return path
