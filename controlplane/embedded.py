"""The embedded mode's files in var/: its directories, and a secret key generated once there.

`make run` serves with DEBUG off (the product's own 404 and 500 pages), and every command the
README shows (`manage.py drf_create_token publisher`, …) runs afterwards without any variable
set: they all read the same key from `var/secret_key`, so sessions and signed values stay valid
across restarts. A deployment sets SECRET_KEY instead (docs/operations.md).
"""

import contextlib
import os
import tempfile
from pathlib import Path

from django.core.management.utils import get_random_secret_key

SECRET_KEY_FILE = "secret_key"


def embedded_secret_key(var_dir: Path) -> str:
    """The key in `var_dir/secret_key`, written there first if missing (mode 0600)."""
    path = var_dir / SECRET_KEY_FILE
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        # Written aside and linked into place: the server and the simulator of `make run`
        # start at once, and the one that loses the race reads the winner's key, never a
        # half-written file.
        fd, scratch = tempfile.mkstemp(dir=var_dir, prefix=".secret_key-")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(get_random_secret_key() + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(scratch, path)
        finally:
            os.unlink(scratch)
    key = path.read_text().strip()
    if not key:
        raise RuntimeError(f"{path} is empty: delete it and a new key is generated")
    return key


def make_var_dirs(var_dir: Path, static_root: Path) -> None:
    """Create var/ (the SQLite database, the beat schedule) and the static root (WhiteNoise warns
    when it is missing): once a process has started (ControlPlaneConfig.ready), never at import."""
    for directory in (var_dir, static_root):
        directory.mkdir(parents=True, exist_ok=True)
