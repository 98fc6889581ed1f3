"""File checksums stored in artifacts and run metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of the bytes of ``path`` (read in blocks: a file of gigabytes is not held in memory)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
