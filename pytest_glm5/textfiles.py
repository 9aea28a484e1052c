"""Text files the user edits (configs, baselines), read the same way on every machine."""

from __future__ import annotations

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
