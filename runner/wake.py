"""Wake-ups: inotify, through watchdog, tells a waiting process the moment a file lands.

A ``Waker`` watches some spool folders and collects (folder, name) of what appeared or
changed; ``wait`` returns them, or an empty list when the timeout (the slow poll that stays as
a fallback) ran out first. A lost event (an inotify queue overflow, say) delays a job until the
next poll or reconcile; it never strands it: wake-ups are hints, the listings are the truth.

The caller's own thread reads the inotify fd: ``wait`` polls it (and a self-pipe that ``poke``
writes, from a signal handler) with the timeout, then reads every queued event without
blocking. watchdog's Observer would run a thread per watched folder plus one reading the fd,
and hand each event across them: 1.0-1.5 ms of the coordinator's CPU per job and ~130 futex
calls per job (docs/performance.md, "Where the time goes"). Nothing here pairs moves: a move's
new name is what landed, and IN_MOVED_TO alone says it.

The watchdog internals this relies on (tests/unit/test_override_shapes.py fails if their shape
changes; verified with watchdog 7.0.0 and 7.1.0): in ``watchdog.observers.inotify_c``, the
ctypes bindings ``inotify_init()`` and ``inotify_add_watch(fd, path: bytes, mask)`` (each -1 with
errno set on failure), ``InotifyFD._parse_event_buffer(bytes)`` yielding (wd, mask, cookie,
name), and the ``InotifyConstants.IN_*`` masks. When they are missing, ``Waker`` falls back to
watchdog's threaded Observer (``_ThreadedWaker``), which needs only public API plus the
move-pairing override described at ``_no_move_pairing_delay``.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from watchdog.events import FileSystemEventHandler

log = logging.getLogger("spool.inotify")

# At most ~100 coordinator passes a second while jobs land (each pass's fixed cost: the schedules,
# the timers' ledger query, the chains, the lease watch's checks), and a drop, a promotion or a
# delayed job's readiness at most this much later; workers never settle (a pickup is at once).
SETTLE_SECONDS = 0.01
_MAX_REMEMBERED = 10_000  # past that, the next reconcile's listing finds what landed
_BUFFER = 64 * 1024  # bytes per read of the inotify fd (an event is 16 bytes + its name)
_NAME_MAX = 256


class Waker:
    """Watch ``folders``; ``wait`` for what lands; ``poke`` wakes a wait at once; ``stop``.

    In the folders also named in ``landings_only``, only a file created or renamed in wakes the
    wait, not a write in place (there, those are the runner's own dot-files: heartbeats,
    ``.wake``), which spares the waiter a wake-up per write."""

    def __init__(self, folders: Iterable[Path], *, landings_only: Iterable[Path] = ()) -> None:
        folders = list(folders)
        landings = {str(folder) for folder in landings_only}
        binding = _inotify_binding()
        if binding is None:
            self._impl: _InotifyWaker | _ThreadedWaker = _ThreadedWaker(folders, landings)
        else:
            self._impl = _InotifyWaker(folders, landings, binding)

    @property
    def threaded(self) -> bool:
        """True when watchdog's Observer threads deliver the events (its internals were missing)."""
        return isinstance(self._impl, _ThreadedWaker)

    def wait(self, timeout_seconds: float, *, settle_seconds: float = 0.0) -> list[tuple[str, str]]:
        """Block until something lands or ``timeout_seconds`` pass; return what landed.

        ``settle_seconds``: while things land, return no sooner than that after the call,
        gathering what lands meanwhile. A waiter whose pass costs the same for one landing as
        for fifty (the coordinator's: ``SETTLE_SECONDS``) then makes one pass per
        burst, not one per file; after a quiet spell the first landing still returns at once."""
        started = time.monotonic()
        landed = self._impl.wait(timeout_seconds)
        # Never more than settle_seconds, whatever the clock does (faketime steps monotonic too).
        rest = min(settle_seconds, timeout_seconds) - max(time.monotonic() - started, 0.0)
        if landed and rest > 0:
            landed += self._impl.gather(rest)
        return landed

    def gather(self, seconds: float) -> list[tuple[str, str]]:
        """Wait ``seconds`` whatever lands (a poke ends it sooner); return what landed meanwhile."""
        return self._impl.gather(seconds)

    def poke(self) -> None:
        """Wake the waiter now (a signal handler asking it to stop); safe in a signal handler."""
        self._impl.poke()

    def stop(self) -> None:
        self._impl.stop()


class _Binding:
    """What of watchdog's inotify layer ``_InotifyWaker`` calls (see the module doc)."""

    def __init__(self, inotify_c: Any) -> None:
        self.init: Callable[[], int] = inotify_c.inotify_init
        self.add_watch: Callable[[int, bytes, int], int] = inotify_c.inotify_add_watch
        self.parse: Callable[[bytes], Iterator[tuple[int, int, int, bytes]]] = inotify_c.InotifyFD._parse_event_buffer  # noqa: SLF001 - pinned in test_override_shapes
        constants = inotify_c.InotifyConstants
        # What can mean "a file landed or changed": created (a link(2), a user's write in place),
        # renamed in, written, closed after a write. Not opens, reads or moves out.
        self.landing: int = constants.IN_CREATE | constants.IN_MOVED_TO | constants.IN_ONLYDIR
        self.mask: int = self.landing | constants.IN_MODIFY | constants.IN_CLOSE_WRITE
        self.overflow: int = constants.IN_Q_OVERFLOW
        self.skip: int = constants.IN_ISDIR | constants.IN_IGNORED


def _inotify_binding() -> _Binding | None:
    """watchdog's inotify bindings, or None (not Linux, or its internals moved: use threads)."""
    try:
        from watchdog.observers import inotify_c  # start-up: only a waiting process needs inotify

        return _Binding(inotify_c)
    except (ImportError, AttributeError, OSError) as err:
        log.debug("watchdog's inotify internals are not usable (%s): its Observer threads deliver wake-ups", err)
        return None
    except Exception as err:  # watchdog's UnsupportedLibcError, on a libc without inotify
        log.debug("no inotify (%s): watchdog's Observer threads deliver wake-ups", err)
        return None


class _InotifyWaker:
    def __init__(self, folders: list[Path], landings: set[str], binding: _Binding) -> None:
        self._binding = binding
        self._fd = _checked(binding.init(), "inotify_init")
        self._folder_of: dict[int, str] = {}
        self._poke_r = self._poke_w = -1
        try:
            os.set_inheritable(self._fd, False)  # ctypes' fd is inheritable; an attempt child needs none
            os.set_blocking(self._fd, False)
            for folder in folders:
                mask = binding.landing if str(folder) in landings else binding.mask
                wd = _checked(binding.add_watch(self._fd, os.fsencode(folder), mask), f"watch {folder}")
                self._folder_of[wd] = Path(folder).name
            self._poke_r, self._poke_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except BaseException:
            self.stop()
            raise
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._poll.register(self._poke_r, select.POLLIN)
        self._poke_poll = select.poll()  # ``gather``: woken by a poke only, not by each landing
        self._poke_poll.register(self._poke_r, select.POLLIN)

    def wait(self, timeout_seconds: float) -> list[tuple[str, str]]:
        # Rounded up: a wait that returns a hair early would only make its caller wait again.
        ready = {fd for fd, _ in self._poll.poll(math.ceil(max(timeout_seconds, 0.0) * 1000.0))}
        if self._poke_r in ready:
            self._drain_pokes()
        return self._read_events() if self._fd in ready else []

    def gather(self, seconds: float) -> list[tuple[str, str]]:
        """What lands in the next ``seconds``, read once at the end (a poke ends it sooner). A
        poll's relative timeout, not a sleep, whose deadline would be taken on a faked clock."""
        if self._poke_poll.poll(math.ceil(seconds * 1000.0)):
            self._drain_pokes()
        return self._read_events()

    def _drain_pokes(self) -> None:
        try:
            while os.read(self._poke_r, 512):
                pass
        except BlockingIOError:
            pass

    def _read_events(self) -> list[tuple[str, str]]:
        """Every event queued now, in order, each (folder, name) once."""
        seen: dict[tuple[str, str], None] = {}
        while True:
            try:
                buffer = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            for wd, mask, _cookie, name in self._binding.parse(buffer):
                if mask & self._binding.overflow:
                    log.debug("the inotify queue overflowed: some wake-ups are lost (the next listing finds them)")
                    continue
                folder = self._folder_of.get(wd)
                if mask & self._binding.skip or folder is None or not name:
                    continue
                if len(seen) < _MAX_REMEMBERED:
                    seen[(folder, os.fsdecode(name))] = None
            if len(buffer) < _BUFFER - 16 - _NAME_MAX:
                break  # the kernel had no more when it filled this read: spare the EAGAIN read
        return list(seen)

    def poke(self) -> None:
        try:
            os.write(self._poke_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # full: a wake-up is already queued; closed: stopping anyway

    def stop(self) -> None:
        for fd in (self._fd, self._poke_r, self._poke_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._poke_r = self._poke_w = -1


def _checked(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


class _ThreadedWaker:
    """The fallback: watchdog's Observer, whose threads hand each event to the waiter."""

    def __init__(self, folders: list[Path], landings: set[str]) -> None:
        # start-up: the threaded Observer is imported only when the inotify bindings are missing
        from watchdog.events import FileClosedEvent, FileCreatedEvent, FileModifiedEvent, FileMovedEvent
        from watchdog.observers import Observer  # start-up: as above

        self._event = threading.Event()
        self._mutex = threading.Lock()
        self._seen: list[tuple[str, str]] = []
        _no_move_pairing_delay()
        self._observer = Observer()
        # Asking the kernel for these only spares the threads every open and close-after-read.
        every = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent]
        handler = cast("FileSystemEventHandler", self)  # it has the one method the Observer calls
        for folder in folders:
            kinds = [FileCreatedEvent, FileMovedEvent] if str(folder) in landings else every
            self._observer.schedule(handler, str(folder), recursive=False, event_filter=kinds)
        self._observer.daemon = True
        self._observer.start()

    def dispatch(self, event: Any) -> None:
        """Called by watchdog's emitter threads for each event (the handler protocol)."""
        if event.is_directory or event.event_type in ("opened", "closed_no_write", "deleted"):
            return
        # A move's new name is what landed. Events carry str paths (folders are watched by str).
        path = Path(os.fsdecode(event.dest_path or event.src_path))
        with self._mutex:
            if len(self._seen) < _MAX_REMEMBERED:
                self._seen.append((path.parent.name, path.name))
        self._event.set()

    def wait(self, timeout_seconds: float) -> list[tuple[str, str]]:
        self._event.wait(max(timeout_seconds, 0.0))
        with self._mutex:
            self._event.clear()
            seen, self._seen = self._seen, []
        return seen

    def gather(self, seconds: float) -> list[tuple[str, str]]:
        landed: list[tuple[str, str]] = []
        until = time.monotonic() + seconds
        while (rest := until - time.monotonic()) > 0 and rest <= seconds:
            landed += self.wait(rest)
        return landed

    def poke(self) -> None:
        self._event.set()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=2.0)


def _no_move_pairing_delay() -> None:
    """Stop watchdog's threaded emitter holding a folder's events behind a move out of it.

    watchdog holds each IN_MOVED_FROM up to 0.5 s to pair it with its IN_MOVED_TO, at the head of
    a FIFO per folder, so every later event of that folder waits behind it (each claim delayed
    the next submit's wake-up by up to 0.5 s). An unpaired IN_MOVED_TO still reports what landed,
    so the hold is turned off: ``InotifyMoveEventGrouper.delay`` (a class attribute, 0.5 s, that
    ``__init__`` passes to its ``DelayedQueue``) is set to 0 before the Observer starts. The
    setting is process-wide; only Wakers run watchdog in spool.
    """
    # start-up: only the threaded fallback needs it
    from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper

    InotifyMoveEventGrouper.delay = 0.0
