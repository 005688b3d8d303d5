"""What the coordinator keeps of each lease it watches, and the one read it makes of a lease's
heartbeat file (docs/reliability.md, "4. Leases")."""

from __future__ import annotations

from dataclasses import dataclass

from spool.base.errors import InvalidJob
from spool.disk import fs
from spool.disk import HEARTBEAT_MAX_BYTES, heartbeat_lines


@dataclass
class LeaseWatch:
    attempt: int
    worker: str | None
    counter: bytes | None
    changed: float  # our monotonic clock when the counter last changed (or we first saw it)


def read_counter(dir_fd: int, name: str) -> bytes | None:
    """The heartbeat file's counter line; the progress line after it is a display, never a beat."""
    try:
        return heartbeat_lines(fs.read_file(dir_fd, name, HEARTBEAT_MAX_BYTES))[0]
    except (OSError, InvalidJob):  # gone, or planted (a directory): no beat seen; never fatal
        return None
