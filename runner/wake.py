"""Wake-ups: watchdog (inotify) tells a waiting process the moment a file lands.

A ``Waker`` watches some spool folders and collects (folder, name) of what appeared or
changed; ``wait`` returns them, or an empty list when the timeout (the slow poll that stays as
a fallback) ran out first. A lost event delays a job until the next poll; it never strands it.

watchdog holds each IN_MOVED_FROM up to 0.5 s to pair it with its IN_MOVED_TO, at the head of a
FIFO per folder, so every later event of that folder waits behind it: each claim (a rename out
of pending/) used to delay the next submit's wake-up by up to 0.5 s (benchmarks/throughput.py,
idle pickup). A Waker needs only what landed, which an unpaired IN_MOVED_TO still reports (as a
created file), so ``_no_move_pairing_delay`` turns the hold off.

The watchdog internals this relies on (tests/unit/test_override_shapes.py fails if their shape
changes):

- ``watchdog.observers.inotify_move_event_grouper.InotifyMoveEventGrouper``: a class attribute
  ``delay`` (seconds, 0.5) that ``__init__`` passes to its ``DelayedQueue``. We set it to 0 on
  the class before the Observer starts, so every grouper an inotify emitter makes afterwards
  holds nothing; the setting is process-wide, and only Wakers run watchdog in spool. Older
  watchdogs (4 to 6) keep the same hold as ``inotify_buffer.InotifyBuffer.delay``; pyproject.toml
  asks for watchdog 7, the versions this was verified with (7.0.0 and 7.1.0).
- ``watchdog.utils.delayed_queue.DelayedQueue(delay)``: holds an element put with
  ``delay=True`` for ``self.delay`` seconds, and none when that is 0.

Beside those, only public API: ``Observer.schedule(handler, path, recursive=..,
event_filter=[...])`` and the events' ``event_type``, ``is_directory``, ``src_path`` and
``dest_path``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper

_MAX_REMEMBERED = 10_000
# What can mean "a file landed or changed". Asking the kernel for these only spares watchdog's
# threads every open and close-after-read of a spool file (the coordinator reads each heartbeat
# counter on every pass): ~20% of the coordinator's CPU in a drain (benchmarks/throughput.py).
_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent]


class Waker(FileSystemEventHandler):
    def __init__(self, folders: Iterable[Path]) -> None:
        self._event = threading.Event()
        self._mutex = threading.Lock()
        self._seen: list[tuple[str, str]] = []
        _no_move_pairing_delay()
        self._observer = Observer()
        for folder in folders:
            self._observer.schedule(self, str(folder), recursive=False, event_filter=_EVENTS)
        self._observer.daemon = True
        self._observer.start()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write", "deleted"):
            return
        # A move's new name is what landed. Folders are watched by str path, so events carry str
        # paths; fsdecode says so to the type checker (watchdog types them bytes | str).
        path = Path(os.fsdecode(event.dest_path or event.src_path))
        with self._mutex:
            if len(self._seen) < _MAX_REMEMBERED:  # past that, the next reconcile's listing finds it
                self._seen.append((path.parent.name, path.name))
        self._event.set()

    def wait(self, timeout_seconds: float) -> list[tuple[str, str]]:
        """Block until something lands or ``timeout_seconds`` pass; return what landed."""
        self._event.wait(max(timeout_seconds, 0.0))
        with self._mutex:
            self._event.clear()
            seen, self._seen = self._seen, []
        return seen

    def poke(self) -> None:
        """Wake the waiter now (a signal handler asking it to stop)."""
        self._event.set()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=2.0)


def _no_move_pairing_delay() -> None:
    """Stop watchdog holding a folder's events behind a move out of it (see the module doc)."""
    InotifyMoveEventGrouper.delay = 0.0
