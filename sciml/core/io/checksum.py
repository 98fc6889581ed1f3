"""File checksums stored in artifacts and run metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of the bytes of ``path``."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
