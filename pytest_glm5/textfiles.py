"""Text files: read as UTF-8 on every machine, written atomically with one durability and permission policy."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path


def read_utf8(path: Path) -> str:
    """A text file read as UTF-8 whatever the locale; UnicodeError names the file and the byte offset."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnicodeError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line "
                           f"{line}); save the file as UTF-8") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file so that a reader never sees half of it (temp file, fsync, rename), with the mode a plain
    open would give it (an existing file keeps its own): mkstemp's 0600 would lock out the group that shares a
    lease directory and everyone who reads a baselines file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


STALE_TEMP_S = 600.0  # a write takes well under a second: a temp file this old was left by a killed writer


def remove_stale_temps(path: Path, older_than_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove the temp files atomic_write left beside `path` when its writer was killed (kill -9 mid-write);
    returns them. A fresh one may belong to a writer still at work: it is left."""
    gone = []
    now = time.time()
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > older_than_s:
                tmp.unlink()
                gone.append(tmp)
    return gone


SHARED_MODE = 0o666  # lock files: the umask decides, so a group-writable (umask 002) directory is shared for real
