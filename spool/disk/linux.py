"""Linux specifics for ``spool.disk.fsio`` (nothing else calls them): syncfs(2) and the filesystem
type that says whether a syncfs can stand in for an fsync of each file, through ctypes (the ``os``
module lacks them); a read lease that says whether a file is still being written."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
from typing import Any

# From this kernel on syncfs(2) reports a failed writeback; before it, it returned 0 whatever
# happened, so it could not stand in for an fsync there.
SYNCFS_REPORTS_ERRORS = (5, 8)
# Filesystems (statfs f_type) whose syncfs writes and waits for every file's data and names: ext2-4,
# xfs, btrfs, f2fs, tmpfs. Elsewhere (FUSE, whose syncfs did nothing before Linux 5.15; NFS; an
# overlay) a batch fsyncs each file instead.
SYNCFS_FILESYSTEMS = frozenset({0xEF53, 0x58465342, 0x9123683E, 0xF2F52010, 0x01021994})


def syncs_everything(fd: int) -> bool:
    """The filesystem holding ``fd`` is one whose syncfs makes every file's data and names durable."""
    return fs_type(fd) in SYNCFS_FILESYSTEMS


def fs_type(fd: int) -> int | None:
    """The statfs ``f_type`` of the filesystem holding ``fd`` (the struct's first field), or None."""
    if _fstatfs is None:
        return None
    buf = ctypes.create_string_buffer(512)  # larger than any arch's struct statfs
    if _fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def _load_fstatfs() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).fstatfs
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p]
    return fn


_fstatfs = _load_fstatfs()


def load_syncfs() -> Any:
    """libc's syncfs, or None where it is missing or can't report a failed write (see above)."""
    release = os.uname().release.split("-", 1)[0].split(".")
    try:
        version = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return None
    if os.uname().sysname != "Linux" or version < SYNCFS_REPORTS_ERRORS:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_int]
    return fn


def refuse_if_being_written(fd: int, name: str) -> None:
    """BlockingIOError while any process has ``fd``'s file open for writing: F_SETLEASE(F_RDLCK)
    fails with EAGAIN then. Where leases are off (EACCES, EINVAL, ENOLCK), the file is taken as it is."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EBUSY):
            raise BlockingIOError(errno.EAGAIN, "still being written", name) from None
        return
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
