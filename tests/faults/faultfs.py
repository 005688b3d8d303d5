"""FaultFS: a ``spool.disk.fsio.RealFS`` that records the risky calls a transition makes and fails one.

Every call still goes to the real filesystem; FaultFS only watches the four kinds of system call
that can fail with an I/O error and lose or tear data, and turns the one a test picks into an
``OSError``. Because the fault is raised at the system call, inside the real ``RealFS`` method,
the product's own error handling (cleanup of a half-written tmp file, DiskFull for ENOSPC,
DurabilityError for a failed fsync) is what the test exercises.

    kind     the call                                           a fault does
    write    os.write in write_new, or in append (an attempt    a short write of half the bytes,
             log's output); os.pwrite in rewrite_spare          then the error on the next write
    fsync    os.fsync of a file (write_new, fsync_file) or a     the error, no fsync
             folder (fsync_dir); syncfs(2) (syncfs)
    rename   renameat2 / os.rename (rename_noreplace,           the error, nothing moved
             rename_replace, rename_exchange)
    link     os.link (link; rename_noreplace's fallback)        the error, nothing linked

Use:

    recorder = FaultFS()                                  # fails nothing: count the calls
    with recorder.installed():
        sp.submit("echo")
    len(recorder.ops)                                     # e.g. 8: the calls a submit makes

    faults = FaultFS(fail_at=3, error=errno.EIO)          # the 3rd risky call (1-based) fails
    faults = FaultFS(fail_at=1, error=errno.EIO, kinds={"fsync"})   # count fsyncs only
    with faults.installed():
        ...                                               # faults.failed: the Op that failed
    faults.fsyncs_after_failure()                         # fsyncs of the failed fd after it

``installed()`` puts the FaultFS behind the seam every spool module calls (``spool.disk.fsio.use``
swaps what ``spool.disk.fsio.fs`` delegates to) and puts the original back on exit; ``install()``
does the same until its returned function is called (tests/faults/inject_faults.py, for a whole
process). Counting starts at install. Not thread-safe: while a FaultFS method runs,
``spool.disk.fsio.os`` is a proxy for the whole process.
"""

from __future__ import annotations

import ctypes
import errno as errnos
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import spool.disk.fsio as fsio
from spool.disk.fsio import RealFS

KINDS = ("write", "fsync", "rename", "link")


@dataclass(frozen=True)
class Op:
    """One risky call: its 1-based index among all risky calls, kind, RealFS method, fd, name."""

    index: int
    kind: str
    method: str
    fd: int
    name: str

    def __str__(self) -> str:
        return f"#{self.index} {self.kind} in {self.method}({self.name or f'fd {self.fd}'})"


class FaultFS(RealFS):
    """Records every risky call in ``ops``; fails the ``fail_at``-th one of ``kinds`` with ``error``."""

    def __init__(self, fail_at: int | None = None, error: int = errnos.EIO, kinds: Collection[str] = KINDS) -> None:
        super().__init__()
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}; known: {KINDS}")
        self.fail_at, self.error, self.kinds = fail_at, error, frozenset(kinds)
        self.ops: list[Op] = []
        self.failed: Op | None = None
        self._counted = 0
        self._method, self._name = "?", ""
        self._torn_fd: int | None = None  # a write fault's short write happened; the next write fails
        if self._renameat2 is not None:
            self._renameat2 = self._wrap_renameat2(self._renameat2)
        if self._syncfs is not None:
            self._syncfs = self._wrap_syncfs(self._syncfs)

    # -- what tests read ---------------------------------------------------------------------

    def fsyncs_after_failure(self) -> list[Op]:
        """fsyncs of the failed call's fd after it failed (a failed fsync must never be retried)."""
        if self.failed is None:
            return []
        return [
            op for op in self.ops if op.index > self.failed.index and op.kind == "fsync" and op.fd == self.failed.fd
        ]

    # -- putting it in place -----------------------------------------------------------------

    def install(self) -> Callable[[], None]:
        """Put this behind the seam every spool module calls; returns the function that puts it back."""
        original = fsio.use(self)

        def restore() -> None:
            fsio.use(original)

        return restore

    @contextmanager
    def installed(self) -> Iterator[FaultFS]:
        restore = self.install()
        try:
            yield self
        finally:
            restore()

    # -- the RealFS methods that make risky calls --------------------------------------------

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool, mode: int | None = None) -> None:
        with self._in("write_new", name):
            super().write_new(dir_fd, name, data, sync=sync, mode=mode)

    def fsync_dir(self, dir_fd: int) -> None:
        with self._in("fsync_dir", ""):
            super().fsync_dir(dir_fd)

    def fsync_file(self, dir_fd: int, name: str) -> None:
        with self._in("fsync_file", name):
            super().fsync_file(dir_fd, name)

    def syncfs(self, dir_fd: int) -> bool:
        with self._in("syncfs", ""):
            return super().syncfs(dir_fd)

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        with self._in("rename_noreplace", dst):
            super().rename_noreplace(src_fd, src, dst_fd, dst)

    def rename_replace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        with self._in("rename_replace", dst):
            super().rename_replace(src_fd, src, dst_fd, dst)

    def rename_exchange(self, src_fd: int, src: str, dst_fd: int, dst: str) -> bool:
        with self._in("rename_exchange", dst):
            return super().rename_exchange(src_fd, src, dst_fd, dst)

    def rewrite_spare(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> bool:
        with self._in("rewrite_spare", name):
            return super().rewrite_spare(dir_fd, name, data, sync=sync)

    def link(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        with self._in("link", dst):
            super().link(src_fd, src, dst_fd, dst)

    def append(self, fd: int, data: bytes) -> None:
        with self._in("append", ""):
            super().append(fd, data)

    # -- the system-call level ---------------------------------------------------------------

    @contextmanager
    def _in(self, method: str, name: str) -> Iterator[None]:
        """Route fsio's ``os`` calls through this FaultFS while ``method`` runs."""
        outer = self._method, self._name
        self._method, self._name = method, name
        real_os = fsio.os
        fsio.os = _FaultingOS(real_os, self)  # type: ignore[assignment]
        try:
            yield
        finally:
            fsio.os = real_os
            self._method, self._name = outer

    def _risky(self, kind: str, fd: int) -> bool:
        """Record one risky call; True when it is the one to fail."""
        op = Op(len(self.ops) + 1, kind, self._method, fd, self._name)
        self.ops.append(op)
        if kind not in self.kinds or self.failed is not None:
            return False
        self._counted += 1
        if self._counted != self.fail_at:
            return False
        self.failed = op
        return True

    def _oserror(self) -> OSError:
        return OSError(self.error, os.strerror(self.error), self._name or None)

    def _wrap_renameat2(self, real: Any) -> Callable[..., int]:
        def renameat2(src_fd: int, src: bytes, dst_fd: int, dst: bytes, flags: int) -> int:
            if self._risky("rename", dst_fd):
                ctypes.set_errno(self.error)
                return -1
            result: int = real(src_fd, src, dst_fd, dst, flags)
            return result

        return renameat2

    def _wrap_syncfs(self, real: Any) -> Callable[[int], int]:
        """A syncfs fault is what the kernel reports for a failed writeback: -1 with the errno."""

        def syncfs(fd: int) -> int:
            if self._risky("fsync", fd):
                ctypes.set_errno(self.error)
                return -1
            result: int = real(fd)
            return result

        return syncfs


class _FaultingOS:
    """fsio's view of ``os`` while a FaultFS method runs: five calls watched, the rest passed on."""

    def __init__(self, real: Any, faults: FaultFS) -> None:
        self._real, self._faults = real, faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def write(self, fd: int, data: Any) -> int:
        faults = self._faults
        if faults._torn_fd == fd:
            faults._torn_fd = None
            raise faults._oserror()
        if faults._risky("write", fd):
            if len(data) > 1:  # like a filling disk: part of the data lands, then the error
                faults._torn_fd = fd
                written: int = self._real.write(fd, data[: len(data) // 2])
                return written
            raise faults._oserror()
        written = self._real.write(fd, data)
        return written

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        faults = self._faults
        if faults._torn_fd == fd:
            faults._torn_fd = None
            raise faults._oserror()
        if faults._risky("write", fd):
            if len(data) > 1:  # as write: part of the data lands, then the error
                faults._torn_fd = fd
                written: int = self._real.pwrite(fd, data[: len(data) // 2], offset)
                return written
            raise faults._oserror()
        written = self._real.pwrite(fd, data, offset)
        return written

    def fsync(self, fd: int) -> None:
        if self._faults._risky("fsync", fd):
            raise self._faults._oserror()
        self._real.fsync(fd)

    def rename(self, src: str, dst: str, **kwargs: Any) -> None:
        if self._faults._risky("rename", kwargs.get("dst_dir_fd", -1)):
            raise self._faults._oserror()
        self._real.rename(src, dst, **kwargs)

    def link(self, src: str, dst: str, **kwargs: Any) -> None:
        if self._faults._risky("link", kwargs.get("dst_dir_fd", -1)):
            raise self._faults._oserror()
        self._real.link(src, dst, **kwargs)
