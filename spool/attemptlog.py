"""An attempt's log, ``logs/<id>.<attempt>.log``: written by its worker, capped, keeping the tail.

The worker reads the attempt child's stdout and stderr from a pipe and appends them here through
``AttemptLog``, opened relative to the logs/ folder's fd (a renamed spool keeps working, a
symlink is refused). A log keeps at most ``max_log_bytes`` of output, its END, since the end
says what broke: once the file holds twice the cap, the worker writes a fresh file in tmp/ with
a marker line and the last ``max_log_bytes`` bytes and renames it over the log (a reader sees
the old file or the new one, never a mix); closing the log trims it the same way. The marker is
the first line of a trimmed log::

    [spool: 18874368 bytes cut from the front; max_log_bytes 1048576]

Logs are diagnostics, not promises: nothing here is fsync'd, and a write that fails (a full
disk) stops the logging of that attempt, never the attempt itself. The file is created at the
first output, not at the attempt's start (creating a file is the dearest step on some disks,
docs/performance.md): an attempt that printed nothing has no log file, which ``spool logs``
shows exactly as an empty one (``LogReader`` yields nothing while there is no file).

``LogReader`` streams a log in chunks for ``spool logs`` and, following, survives a trim: it
knows from the marker which bytes of the output a new file starts at.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator

from spool.base.errors import DiskFull
from spool.disk.fsio import fs
from spool.disk.layout import tmp_name

__all__ = ["AttemptLog", "LogReader", "marker"]

CHUNK_BYTES = 1 << 16
_MARKER = re.compile(rb"\[spool: ([0-9]+) bytes cut from the front; max_log_bytes [0-9]+\]\n")
_MARKER_MAX = 96  # longer than any marker line


def marker(cut: int, max_bytes: int) -> bytes:
    """The first line of a log whose first ``cut`` bytes of output were dropped."""
    return f"[spool: {cut} bytes cut from the front; max_log_bytes {max_bytes}]\n".encode()


def parse_marker(head: bytes) -> tuple[int, int]:
    """(bytes cut, length of the marker line) from a log's first bytes; (0, 0) if untrimmed."""
    match = _MARKER.match(head)
    return (int(match[1]), match.end()) if match else (0, 0)


class AttemptLog:
    """One attempt's log, written by the worker; ``write`` appends, ``close`` trims.

    The file is created by the first ``write`` with output in it. Raises OSError from the
    constructor when something already holds the log's name and cannot be opened as a log (a
    planted symlink, a directory or FIFO); after that, no method raises (an entry planted later
    makes the first write fail, which stops the log as any failed write does).
    """

    def __init__(self, logs_fd: int, tmp_fd: int, name: str, max_bytes: int) -> None:
        self.name, self.max_bytes = name, max_bytes
        self._logs_fd, self._tmp_fd = logs_fd, tmp_fd
        self._fd: int | None = None
        self._size = 0  # what the file holds (marker included)
        self._unopened = fs.lstat(logs_fd, name) is None  # created at the first output
        if not self._unopened:
            self._open()
        self._header = 0  # the marker's length, once trimmed
        self.cut = 0  # output bytes dropped from the front
        self.error: OSError | None = None  # the write that stopped this log, if one failed

    def _open(self) -> None:
        self._unopened = False
        self._fd = fs.open_log(self._logs_fd, self.name)
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        if not data:
            return
        try:
            if self._unopened:
                self._open()
            if self._fd is None:
                return
            if self._size - self._header + len(data) > 2 * self.max_bytes:
                self._trim(data)
            else:
                fs.append(self._fd, data)
                self._size += len(data)
        except OSError as err:
            self.error = err
            self._close_fd()

    def close(self) -> None:
        """Trim to the cap and close; harmless twice. Never creates the file."""
        self._unopened = False
        if self._fd is not None and self._size - self._header > self.max_bytes:
            try:
                self._trim(b"")
            except OSError as err:
                self.error = err
        self._close_fd()

    def _trim(self, data: bytes) -> None:
        """Replace the log with a marker and the last ``max_bytes`` of (the file's output + data)."""
        assert self._fd is not None
        body = self._size - self._header
        keep_old = max(0, min(body, self.max_bytes - len(data)))
        old = os.pread(self._fd, keep_old, self._size - keep_old) if keep_old else b""
        tail = (old + data[-self.max_bytes :])[-self.max_bytes :]
        self.cut += body + len(data) - len(tail)
        head = marker(self.cut, self.max_bytes)
        staged = tmp_name()
        try:
            fs.write_new(self._tmp_fd, staged, head + tail, sync=False)
        except DiskFull as err:  # the seam names ENOSPC for submit's sake; to a log it is an OSError
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from err
        try:
            fs.rename_replace(self._tmp_fd, staged, self._logs_fd, self.name)
        except BaseException:
            fs.unlink(self._tmp_fd, staged, missing_ok=True)
            raise
        self._close_fd()
        self._fd = fs.open_log(self._logs_fd, self.name)
        self._size, self._header = len(head) + len(tail), len(head)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LogReader:
    """Reads a log in chunks; ``chunks()`` again later yields only what was added (or survived a
    trim) since, and nothing while there is no file yet."""

    def __init__(self, logs_fd: int, name: str) -> None:
        self._logs_fd, self._name = logs_fd, name
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None
        self._offset = 0  # where we are in the open file
        self.shown = 0  # output bytes (of the whole stream, cut ones included) handed out so far

    def chunks(self) -> Iterator[bytes]:
        if self._fd is None and not self._reopen():
            return
        while True:
            yield from self._read_open_file()
            if not self._replaced() or not self._reopen():
                return

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _read_open_file(self) -> Iterator[bytes]:
        assert self._fd is not None
        while chunk := os.pread(self._fd, CHUNK_BYTES, self._offset):
            self._offset += len(chunk)
            self.shown += len(chunk)
            yield chunk

    def _replaced(self) -> bool:
        """Whether the name now holds another file than ours (the worker trimmed the log)."""
        info = fs.lstat(self._logs_fd, self._name)
        return info is not None and (info.st_dev, info.st_ino) != self._inode

    def _reopen(self) -> bool:
        try:
            fd = fs.open_for_reading(self._logs_fd, self._name)
        except FileNotFoundError:
            return False
        self.close()
        self._fd = fd
        info = os.fstat(fd)
        self._inode = (info.st_dev, info.st_ino)
        cut, header = parse_marker(os.pread(fd, _MARKER_MAX, 0))
        if header and self.shown < cut:
            # Output was cut before we could show it: show the marker line, then the file's output
            # (which starts at stream offset ``cut``, reached once the marker is read).
            self._offset, self.shown = 0, cut - header
        else:
            # Skip what we showed already; the file's output starts at stream offset ``cut``.
            self._offset = header + max(0, self.shown - cut)
        return True
