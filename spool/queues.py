"""``queues/<name>.yaml``: a queue's limits as a person reads and writes them, and their way into
the ledger, where every claim reads them (``spool.ledger.limits``).

A queue file holds any of ``concurrency: N`` (jobs of the queue leased at once, over every worker
of the spool), ``rate: N/PERIOD`` (claims in any sliding PERIOD, ``s``, ``m`` or ``h``) and
``paused: true|false``. A queue without a file, or whose file sets nothing, is unlimited.

The files are the truth and the ledger's ``queue_limits`` the copy a claim decides by: ``spool
queue set|pause|resume`` write the file (tmp/, fsync, rename, fsync queues/) and then the row, so
the change holds for the next claim; ``sync`` (the coordinator, every pass) brings hand edits in.
A file that does not parse keeps the row's limits as they were (the last valid ones stay in force)
and records its error for ``spool queue list``; a removed file removes its limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spool.base.errors import InvalidJob
from spool.disk.fsio import fs
from spool.disk.ids import is_valid_id
from spool.disk.layout import QUEUES, queue_file_name, queue_of_file_name
from spool.ledger.limits import Hold, Limits
from spool.moves.store import stage, unstage
from spool.yaml.safe import dump_yaml, load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

__all__ = [
    "Hold",
    "InvalidQueue",
    "Limits",
    "QueueFile",
    "hold_of",
    "parse_rate",
    "rate_text",
    "read_files",
    "set_limits",
    "sync",
]

MAX_QUEUE_FILE_BYTES = 4096
FIELDS = ("concurrency", "rate", "paused")
MAX_LIMIT = 1_000_000_000
PERIODS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}
_RATE = re.compile(r"([0-9]{1,10})/(s|m|h)")


class InvalidQueue(InvalidJob):
    """A queue file or a ``spool queue set`` that is not a queue's limits (exit 2 from the CLI)."""


@dataclass(frozen=True)
class QueueFile:
    """One file in queues/: its limits, or the error that keeps it from having any."""

    name: str
    signature: str  # inode, size, mtime and ctime: a change means read it again
    limits: Limits | None
    error: str | None


def parse_rate(text: object, where: str) -> tuple[int, int]:
    """``N/s``, ``N/m`` or ``N/h`` as (claims, window in ms)."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_LIMIT:
        raise InvalidQueue(f"{where}: field 'rate': expected N/s, N/m or N/h with N a positive integer, got {text!r}")
    return int(match.group(1)), PERIODS_MS[match.group(2)]


def rate_text(limits: Limits) -> str | None:
    """The rate as a file writes it (``5/s``), or None."""
    if limits.rate_count is None or limits.rate_ms is None:
        return None
    unit = next((unit for unit, ms in PERIODS_MS.items() if ms == limits.rate_ms), None)
    return f"{limits.rate_count}/{unit}" if unit else f"{limits.rate_count}/{limits.rate_ms}ms"


def limits_of_fields(fields: object, where: str) -> Limits:
    """A queue file's fields as Limits; InvalidQueue naming the field that is wrong."""
    if fields is None:
        return Limits()
    if not isinstance(fields, Mapping):
        raise InvalidQueue(f"{where}: expected a mapping of {', '.join(FIELDS)}")
    for name in fields:
        if name not in FIELDS:
            raise InvalidQueue(f"{where}: unknown field {str(name)!r}; expected one of {', '.join(FIELDS)}")
    concurrency = fields.get("concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_LIMIT
    ):
        raise InvalidQueue(
            f"{where}: field 'concurrency': expected a positive integer (pause the queue for none), got {concurrency!r}"
        )
    rate = parse_rate(fields["rate"], where) if fields.get("rate") is not None else (None, None)
    paused = fields.get("paused", False)
    if not isinstance(paused, bool):
        raise InvalidQueue(f"{where}: field 'paused': expected true or false, got {paused!r}")
    return Limits(concurrency, rate[0], rate[1], paused)


def fields_of_limits(limits: Limits) -> dict[str, Any]:
    """What a queue file holds for ``limits`` (the limits set, and ``paused`` always)."""
    fields: dict[str, Any] = {}
    if limits.concurrency is not None:
        fields["concurrency"] = limits.concurrency
    if (rate := rate_text(limits)) is not None:
        fields["rate"] = rate
    fields["paused"] = limits.paused
    return fields


def check_name(name: str) -> str:
    if not is_valid_id(name):
        raise InvalidQueue(f"queue {name!r}: a queue's name is letters, digits, '_' and '-' (at most 64)")
    return name


# -- the folder ---------------------------------------------------------------------------------


def _folder(sp: Handle, *, make: bool = False) -> int | None:
    """queues/'s fd; None when it is missing (a spool made before queues) and ``make`` is not asked."""
    try:
        return sp.layout.fd(QUEUES)
    except FileNotFoundError:
        if not make:
            return None
    try:
        fs.make_dir(QUEUES, 0o700, dir_fd=sp.layout.root_fd)
    except FileExistsError:
        pass  # RACE: another writer made it
    fs.fsync_dir(sp.layout.root_fd)
    return sp.layout.fd(QUEUES)


def read_files(sp: Handle) -> dict[str, QueueFile]:
    """Every ``queues/<name>.yaml`` by name (other names are no queue's and are left alone)."""
    folder = _folder(sp)
    if folder is None:
        return {}
    found: dict[str, QueueFile] = {}
    for file_name in sorted(fs.list_dir(folder)):
        name = queue_of_file_name(file_name)
        if not is_valid_id(name):
            continue
        info = fs.lstat(folder, file_name)
        if info is None:
            continue  # removed since the listing
        signature = f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
        where = f"queues/{file_name}"
        try:
            data = fs.read_file(folder, file_name, MAX_QUEUE_FILE_BYTES)
            fields = load_yaml(data, max_bytes=MAX_QUEUE_FILE_BYTES, source=where)
            found[name] = QueueFile(name, signature, limits_of_fields(fields, where), None)
        except FileNotFoundError:
            continue
        except InvalidJob as err:  # the safe loader's errors (and a symlink, a FIFO) are InvalidJob too
            found[name] = QueueFile(name, signature, None, str(err))
    return found


def sync(sp: Handle) -> dict[str, QueueFile]:
    """Bring the ledger's limits in step with queues/ (changed files only); returns the files."""
    files = read_files(sp)
    rows = sp.ledger.queue_limit_rows()
    for name, queue_file in files.items():
        row = rows.get(name)
        if row is None or row[2] != queue_file.signature:
            sp.ledger.set_queue_limits(name, queue_file.limits, queue_file.error, queue_file.signature)
    if set(rows) - set(files):
        sp.ledger.forget_queue_limits(set(files))
    sp.ledger.limits_synced()
    return files


def set_limits(
    sp: Handle,
    name: str,
    *,
    concurrency: int | None = None,
    rate: str | None = None,
    paused: bool | None = None,
    clear: bool = False,
) -> Limits:
    """Rewrite ``queues/<name>.yaml`` with the limits changed as asked (``clear``: no concurrency
    and no rate, before the others are set), then the ledger's row; returns the limits now in force."""
    check_name(name)
    current = read_files(sp).get(name)
    if current is not None and current.limits is None and not clear:
        raise InvalidQueue(f"{current.error}; fix queues/{queue_file_name(name)} by hand, or `--clear` it")
    base = current.limits if current is not None and current.limits is not None else Limits()
    if clear:
        base = Limits(paused=base.paused)
    fields = fields_of_limits(base)
    if concurrency is not None:
        fields["concurrency"] = concurrency
    if rate is not None:
        fields["rate"] = rate
    if paused is not None:
        fields["paused"] = paused
    limits = limits_of_fields(fields, f"queue {name}")
    _write(sp, name, fields_of_limits(limits))
    sync(sp)
    return limits


def _write(sp: Handle, name: str, fields: Mapping[str, Any]) -> None:
    """tmp/ (fsync'd), rename over queues/<name>.yaml, fsync queues/: the old file or the new one."""
    folder = _folder(sp, make=True)
    assert folder is not None
    staged = stage(sp, dump_yaml(dict(fields)), sync=True)
    try:
        fs.rename_replace(sp.layout.fd("tmp"), staged, folder, queue_file_name(name))
    finally:
        unstage(sp, staged)
    fs.fsync_dir(folder)


def limits_in_force(sp: Handle, name: str) -> Limits:
    """What claims of queue ``name`` are held to now (NotFound never: no file is no limit)."""
    row = sp.ledger.queue_limit_rows().get(name)
    return row[0] if row is not None else Limits()


def hold_of(sp: Handle, queue: str) -> Hold | None:
    """Why a ready job of ``queue`` is not claimed now, or None."""
    return sp.ledger.hold_of(queue, int(sp.clock.wall() * 1000))
