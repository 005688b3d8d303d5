"""The server's one watch of pending/: it wakes every long-polling lease request at once.

One ``Waker`` (inotify) runs in a thread of its own for the whole server, however many remote
workers wait; each landing in pending/ (a submit, a retry, a release, the coordinator's
``.wake`` after making a job ready) bumps a generation and sets an ``asyncio.Event`` on the
server's loop. A waiting request takes ``ticket()`` *before* it tries to claim, so a job that
lands between its failed claim and its wait still wakes it: nothing is polled in a busy loop and
nothing is missed. The Waker's slow poll (``poll_seconds``) also wakes everyone, the fallback
that stays for a lost event, as in the local worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from spool.runner.wake import Waker

log = logging.getLogger("spool.serve")


class PendingWatch:
    """Wake-ups for lease requests; ``start`` on the server's loop, ``stop`` at shutdown."""

    def __init__(self, pending: Path, poll_seconds: float) -> None:
        self._pending = pending
        self._poll_seconds = poll_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event = asyncio.Event()
        self._waker: Waker | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    async def start(self) -> None:
        """Begin watching, from a coroutine on the loop whose requests it will wake."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._waker = Waker([self._pending])
        self._thread = threading.Thread(target=self._watch, name="spool-pending-watch", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping = True
        if self._waker is not None:
            self._waker.poke()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)
        if self._waker is not None:
            self._waker.stop()
        self._wake()

    def ticket(self) -> asyncio.Event:
        """The event the next landing sets: take it before trying to claim, then wait on it."""
        return self._event

    def _watch(self) -> None:
        assert self._waker is not None and self._loop is not None
        while not self._stopping:
            try:
                self._waker.wait(self._poll_seconds)
            except OSError as err:  # the fd went away under us (stopping); a wait never raises else
                log.warning("the watch of pending/ stopped: %s", err)
                return
            try:
                self._loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop closed: the server is gone
                return

    def _wake(self) -> None:
        """On the loop: set the current event and hand out a fresh one for the next landing."""
        event, self._event = self._event, asyncio.Event()
        event.set()
