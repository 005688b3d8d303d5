"""The marker that makes a folder a spool: ``.spool``, holding ``spool_format: N``, the version of
the layout and file formats it was written in. A spool of a newer format than this code reads is
refused (its files may hold what this code would misread); an older one is read as it is, since
every format change so far only added (docs/operations.md, "Upgrades")."""

from __future__ import annotations

import re
from pathlib import Path

from spool.base.errors import NotASpool, SpoolError
from spool.disk.fsio import fs

MARKER, FORMAT = ".spool", 1  # the marker file, and the format version it holds

_FORMAT_LINE = re.compile(r"^spool_format:\s*([0-9]{1,9})\s*$", re.MULTILINE)


def format_of(root_fd: int) -> int | None:
    """The ``spool_format`` the marker holds; None when it holds no such line (a marker made by
    hand, a read error): such a spool is opened as today's format, as it always was."""
    try:
        text = fs.read_file(root_fd, MARKER, 4096).decode("utf-8", "replace")
    except (OSError, SpoolError):
        return None
    match = _FORMAT_LINE.search(text)
    return int(match.group(1)) if match else None


def check_marker(root: Path, root_fd: int) -> None:
    """NotASpool unless ``root`` holds the marker, of this code's format or an older one."""
    if not fs.exists(root_fd, MARKER):
        raise NotASpool(f"{root}: not a spool; run `spool init`")
    written = format_of(root_fd)
    if written is not None and written > FORMAT:
        raise NotASpool(
            f"{root}: written by a newer spool (spool_format {written}; this one reads {FORMAT}): "
            "upgrade spool to use it (docs/operations.md, 'Upgrades')"
        )
