"""Linux calls the ``os`` module lacks, through ctypes, for ``spool.disk.fsio`` (nothing else calls them):
syncfs(2), and the filesystem type that says whether a syncfs can stand in for an fsync of each file."""

from __future__ import annotations

import ctypes
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
