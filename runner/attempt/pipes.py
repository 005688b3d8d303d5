"""The worker's ends of the pipes to its attempt child: the JSON-lines channel and the output.

The worker and the child speak JSON lines over two dedicated pipes (``pass_fds``, which the
child moves out of a handler's way), so nothing a handler prints can corrupt them:

    child  -> worker  {"hello": true}      once, after the task modules are imported
    worker -> child   {"seq", "job_id", "attempt", "task", "args", "tries_left", "deadline"}
    child  -> worker  {"seq", "progress": {"fraction", "message"}}  any number, while it runs
    child  -> worker  {"seq", "ok", "value", "error", "reject"}   one reply per request
    EOF on the request pipe asks an idle child to exit.

A progress line is what the handler last passed to ``spool.progress``. The child writes it
without blocking (the reply pipe is non-blocking on the child's side, and a line is under
PIPE_BUF, so it goes whole or not at all): when the worker is behind, that value is skipped,
never the handler's time. A progress line for another ``seq`` (a handler's thread that outlived
its attempt) is dropped. Any other line that is not the reply to the request in flight (not
JSON, not a reply, another ``seq``: a handler wrote to the channel after all) raises ``Garbled``:
the worker fails the attempt and replaces the child.

The child's stdout and stderr are a third pipe (``Output``): during an attempt what comes out
goes to the attempt's log (a ``LogSink``), otherwise to the worker's own stderr.
"""

from __future__ import annotations

import json
import os
import select
from typing import Any, Protocol

from spool.progress import Progress, check

__all__ = [
    "HELLO",
    "Garbled",
    "LogSink",
    "Output",
    "Replies",
    "is_progress",
    "is_reply",
    "preview",
    "progress_line",
    "progress_of",
    "request_line",
    "write_all",
]

HELLO = {"hello": True}
REPLY_SLACK = 1 << 16  # a reply may be this much longer than max_result_bytes


class LogSink(Protocol):
    """Where an attempt's stdout and stderr go (``spool.attemptlog.AttemptLog``); never raises."""

    def write(self, data: bytes) -> None: ...


class Garbled(Exception):
    """The channel carried something that is not the protocol: the attempt fails, the child goes."""


def preview(data: bytes) -> str:
    text = data[:80].decode("utf-8", errors="replace")
    return repr(text) + ("..." if len(data) > 80 else "")


def is_reply(message: object, seq: int) -> bool:
    return (
        isinstance(message, dict)
        and set(message) == {"seq", "ok", "value", "error", "reject"}
        and message["seq"] == seq
        and isinstance(message["ok"], bool)
        and isinstance(message["reject"], bool)
        and (message["error"] is None or isinstance(message["error"], str))
    )


def is_progress(message: object) -> bool:
    """A progress line's shape (its values are checked by ``spool.progress.check``)."""
    return (
        isinstance(message, dict)
        and set(message) == {"seq", "progress"}
        and isinstance(message["seq"], int)
        and isinstance(message["progress"], dict)
        and set(message["progress"]) == {"fraction", "message"}
    )


def progress_of(message: dict[str, Any], seq: int) -> Progress | None:
    """The Progress in a progress line for request ``seq``; None for another request's (a
    handler's thread that outlived its attempt); Garbled when its values are not progress."""
    if message["seq"] != seq:
        return None
    values = message["progress"]
    try:
        return check(values["fraction"], values["message"])
    except (TypeError, ValueError) as err:
        raise Garbled(f"the attempt's progress was garbled: {err}") from None


def progress_line(seq: int, encoded: bytes) -> bytes:
    """One progress line: ``encoded`` (``spool.progress.encode``) for request ``seq``."""
    return b'{"seq":%d,"progress":%s}\n' % (seq, encoded)


def request_line(seq: int, deadline: float, encoded: str) -> bytes:
    """One request: ``encoded`` (a JSON object) with the seq and the deadline, known only when it
    is sent, spliced in at the front."""
    return f'{{"seq":{seq},"deadline":{deadline!r},{encoded[1:]}\n'.encode()


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a pipe, blocking or not; BrokenPipeError when the reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # a non-blocking pipe that is full: wait for room
            waiter = select.poll()  # not select(): the child's channel fds are above FD_SETSIZE
            waiter.register(fd, select.POLLOUT)
            waiter.poll()


class Replies:
    """The reply pipe, read without blocking into a buffer that yields one JSON line at a time."""

    def __init__(self, fd: int, poller: select.poll, max_result_bytes: int) -> None:
        self.fd = fd
        self.eof = False
        self._poller = poller
        self._max_line_bytes = max_result_bytes + REPLY_SLACK
        self._buffer = bytearray()

    def read_available(self) -> None:
        while not self.eof:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return
            if not data:
                # EOF before the exit is seen: a handler closed our pipe. Wait for the exit.
                self._poller.unregister(self.fd)
                self.eof = True
            self._buffer += data

    def next_line(self, awaited: str) -> Any:
        """The next whole line, parsed; None until one has arrived. ``awaited`` names what the
        line should be ("the attempt's reply") in the ``Garbled`` message."""
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > self._max_line_bytes:
                raise Garbled(
                    f"{awaited} was garbled: {preview(bytes(self._buffer))} ran on with no "
                    "end (something in the child wrote to its channel to the worker)"
                )
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            return json.loads(line)
        except ValueError:
            raise Garbled(
                f"{awaited} was garbled: {preview(line)} is not JSON (something in the "
                "child wrote to its channel to the worker)"
            ) from None

    def close(self) -> None:
        os.close(self.fd)
        self._buffer.clear()


class Output:
    """The read end of the child's stdout and stderr; closed (``fd`` -1) once every writer is gone."""

    def __init__(self, fd: int, poller: select.poll) -> None:
        self.fd = fd
        self._poller = poller

    def read(self, limit: int, log: LogSink | None) -> None:
        """Move up to ``limit`` bytes to ``log``, or to the worker's own stderr when None."""
        while limit > 0 and self.fd >= 0:
            try:
                data = os.read(self.fd, min(limit, 1 << 20))
            except BlockingIOError:
                return
            if not data:
                self._poller.unregister(self.fd)  # every writer is gone; the fd stays ours
                self.close()
                return
            limit -= len(data)
            if log is not None:
                log.write(data)
            else:
                try:
                    os.write(2, data)  # the worker's own log
                except OSError:
                    pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
