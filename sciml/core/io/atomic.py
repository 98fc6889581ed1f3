"""Atomic writes: temp file in the same directory + fsync + rename.

A reader sees either the previous file or the complete new one, never a partial write, even when the
writer is killed mid-way (POSIX ``rename`` is atomic within one file system).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def default_mode(directory: bool = False) -> int:
    """Permissions a plain ``open``/``mkdir`` would give under the current umask (mkstemp uses 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, default_mode())
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path for a writer that takes a file name (h5py, anndata): renamed over ``path`` on success.

    The temporary file has ``path``'s name, in a scratch folder beside it (a writer that checks the suffix sees
    the real one); it is fsynced, renamed in one step (no copy) and the scratch folder removed. On an exception
    ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp") as scratch:
        tmp = Path(scratch) / path.name
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, default_mode())
        os.replace(tmp, path)
        _fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a directory in a temporary sibling, then swap it in for ``path``.

    An existing ``path`` is replaced only after the new one is complete; if the writer fails or is killed
    the old directory stays as it was (a leftover ``.<name>.*.tmp`` folder may remain and is harmless).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, default_mode(directory=True))
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                with open(child, "rb") as handle:
                    os.fsync(handle.fileno())
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old.tmp"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
