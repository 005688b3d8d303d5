"""The lock and descriptor calls of ``spool.disk.fsio.RealFS`` (it inherits them): per-job and
per-process lock files (flock: the kernel frees them with the process), and descriptors held open.

They are part of the one seam (``fsio.fs``): tests swap the whole ``RealFS`` and these come along.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat


class LockCalls:
    """Opening, taking and dropping lock files; what a held descriptor may do."""

    file_mode: int

    def open_lock(self, dir_fd: int, name: str) -> int:
        """Open (create) a lock file to take its flock on, never following a symlink."""
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode, dir_fd=dir_fd)

    def open_lock_to_probe(self, dir_fd: int, name: str) -> int:
        """Open an existing lock file read-only, to ask whether it is held (flock needs no write
        access, so this works on a read-only spool too). OSError when there is none, or what is
        there is no file a lock could be taken on (a planted directory opens read-only too)."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except BaseException:
            os.close(fd)
            raise
        if not regular:
            os.close(fd)
            raise OSError(errno.EINVAL, "not a lock file", name)
        return fd

    def is_named(self, fd: int, dir_fd: int, name: str) -> bool:
        """Whether ``name`` in ``dir_fd`` is, right now, the file open as ``fd`` (not gone, not
        another file under that name)."""
        held = os.fstat(fd)
        try:
            named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def flock(self, fd: int, *, blocking: bool) -> bool:
        """Take the exclusive flock on ``fd``; False when not ``blocking`` and another holds it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True

    def unflock(self, fd: int) -> None:
        """Drop the flock on ``fd`` and keep the descriptor, to take it again (the ledger's turns)."""
        fcntl.flock(fd, fcntl.LOCK_UN)

    def overwrite_held(self, fd: int, data: bytes) -> None:
        """Replace the content of a file we hold open (a worker's lock: its advertisement)."""
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def set_mode(self, fd: int, mode: int) -> None:
        os.chmod(fd, mode)

    def close(self, fd: int) -> None:
        """Close a descriptor; for a lock's, this drops the flock."""
        os.close(fd)
