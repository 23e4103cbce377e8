"""The one crash-safe file write (temp file, fsync, rename, fsync of the directory) that records, locks,
reports and caches use."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` atomically. On failure (ENOSPC, ...) the old file is untouched,
    the temporary file is removed and the error is raised."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename is None:  # f.write/fsync name no file: name the record
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power cut
        finally:
            os.close(fd)
