"""Small files on the device's disk, written atomically.

A device can lose power at any moment: a file is written to a temporary name in the same
directory, flushed to disk, then renamed over the old one, so a reader finds either the old
content or the new, never half of either.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "read_bytes", "remove"]


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` with `data` in one step (temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_bytes(path: Path) -> bytes | None:
    """The file's content, or None when it does not exist or cannot be read."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def remove(path: Path) -> None:
    """Delete the file if it exists."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
