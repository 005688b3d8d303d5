"""A running attempt's progress: what a handler reports with ``spool.progress(fraction, message)``.

The path it takes, and why no step costs an fsync or a file of its own:

- the handler calls ``progress`` in the attempt child; it checks the values and hands them to the
  sink the child installed for the attempt (``set_sink``), which sends one line to the worker over
  the channel it already has, without blocking (a worker that is behind misses an intermediate
  value, never the handler's time). Outside an attempt there is no sink and a checked call does
  nothing, so a handler runs the same when a test calls it directly;
- the worker keeps the newest value and writes it into the lease's heartbeat file
  (``.<id>.<attempt>.hb``, its second line), coalesced to a few writes a second; a remote worker's
  heartbeat carries it the same way;
- readers (``spool status``, ``spool wait``, the API, the dashboard) call ``read_progress``.

Progress is a display, never a heartbeat: rewriting it leaves the counter on the file's first line
as it was, and only a counter that changes keeps a lease alive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = [
    "MAX_MESSAGE_CHARS",
    "Progress",
    "check",
    "decode",
    "encode",
    "progress",
    "read_progress",
    "read_progresses",
    "set_sink",
]

MAX_MESSAGE_CHARS = 200  # a longer message is cut here (a status line, not a log)
# ensure_ascii spells a character in at most 12 bytes (a surrogate pair, "\ud83d\ude00"): a line
# stays under PIPE_BUF (4096), so the child's write of it is whole or nothing.
MAX_ENCODED_BYTES = 64 + 12 * MAX_MESSAGE_CHARS

_sink: Callable[[Progress], None] | None = None


@dataclass(frozen=True)
class Progress:
    fraction: float | None  # 0.0 .. 1.0; None when the handler gives only a message
    message: str

    def to_mapping(self) -> dict[str, object]:
        return {"fraction": self.fraction, "message": self.message}


def check(fraction: float | None = None, message: str = "") -> Progress:
    """A Progress from a handler's arguments: TypeError or ValueError saying what is wrong."""
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"progress fraction must be a number from 0 to 1 or None, not {type(fraction).__name__}")
        if not (0.0 <= fraction <= 1.0):  # NaN fails this too
            raise ValueError(f"progress fraction must be from 0 to 1, not {fraction!r}")
        fraction = float(fraction)
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a str, not {type(message).__name__}")
    return Progress(fraction, message[:MAX_MESSAGE_CHARS])


def progress(fraction: float | None = None, message: str = "") -> None:
    """Report how far the running handler has got: ``fraction`` from 0 to 1 (or None) and a short
    ``message`` (cut at 200 characters). Cheap (one non-blocking write to the worker); safe from a
    handler's threads; outside an attempt it checks its arguments and does nothing."""
    value = check(fraction, message)
    sink = _sink
    if sink is not None:
        sink(value)


def set_sink(sink: Callable[[Progress], None] | None) -> None:
    """Where ``progress`` sends values (None: nowhere); set by the attempt child around a handler."""
    global _sink  # noqa: PLW0603 - one value for all of a handler's threads, like current()
    _sink = sink


def encode(value: Progress) -> bytes:
    """One line of ASCII JSON (no newline): ``{"fraction": 0.5, "message": "halfway"}``."""
    import json  # start-up: a plain submit imports spool but never encodes progress

    return json.dumps(value.to_mapping(), separators=(",", ":")).encode()


def decode(data: bytes | None) -> Progress | None:
    """The Progress ``encode`` wrote; None for anything else (a torn read, a planted file)."""
    if not data or len(data) > MAX_ENCODED_BYTES:
        return None
    import json  # start-up: a plain submit imports spool but never reads progress

    try:
        mapping = json.loads(data)
    except ValueError:
        return None
    if not isinstance(mapping, dict) or set(mapping) != {"fraction", "message"}:
        return None
    fraction, message = mapping["fraction"], mapping["message"]
    if fraction is not None and not (isinstance(fraction, int | float) and not isinstance(fraction, bool)):
        return None
    if fraction is not None and not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
        return None
    if not isinstance(message, str):
        return None
    return Progress(None if fraction is None else float(fraction), message[:MAX_MESSAGE_CHARS])


def read_progress(sp: Handle, job_id: str, attempt: int | None = None) -> Progress | None:
    """The newest progress of a leased job's newest attempt (or of ``attempt``); None when the job
    is not leased or its handler has not reported any. Reads one small file (and lists leased/
    when the attempt is not given): no lock, no YAML."""
    if attempt is None:
        return read_progresses(sp, [job_id]).get(job_id)
    return _read_one(sp, job_id, attempt)


def read_progresses(sp: Handle, job_ids: Iterable[str]) -> dict[str, Progress]:
    """``read_progress`` of many jobs with one listing of leased/: job id -> progress, for the
    jobs that have some."""
    # The attempt child imports this module for progress() and never reads a heartbeat file.
    from spool.disk.fsio import fs  # start-up: see above
    from spool.disk.layout import State, parse_heartbeat_name  # start-up: see above

    wanted, newest = set(job_ids), dict[str, int]()
    for beat in map(parse_heartbeat_name, fs.list_dir(sp.layout.fd(State.LEASED))):
        if beat is not None and beat[0] in wanted and beat[1] > newest.get(beat[0], 0):
            newest[beat[0]] = beat[1]
    found: dict[str, Progress] = {}
    for job_id, attempt in newest.items():
        value = _read_one(sp, job_id, attempt)
        if value is not None:
            found[job_id] = value
    return found


def _read_one(sp: Handle, job_id: str, attempt: int) -> Progress | None:
    from spool.base.errors import InvalidJob  # start-up: as in read_progresses
    from spool.disk.fsio import fs  # start-up: as in read_progresses
    from spool.disk.heartbeat import heartbeat_lines  # start-up: as above
    from spool.disk.layout import State, heartbeat_name, job_name  # start-up: as above

    leased_fd = sp.layout.fd(State.LEASED)
    try:
        data = fs.read_file(leased_fd, heartbeat_name(job_id, attempt), MAX_ENCODED_BYTES + 128)
    except (OSError, InvalidJob):  # gone (the attempt ended), or planted: no progress to show
        return None
    if not fs.exists(leased_fd, job_name(job_id)):
        return None  # a heartbeat left behind by a move that has not swept it yet
    return decode(heartbeat_lines(data)[1])
