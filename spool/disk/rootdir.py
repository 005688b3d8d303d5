"""Making a spool's folders (``init_spool``) and refusing a root no spool should live in.

``init_spool`` creates every folder of ``spool.disk.layout.FOLDERS`` and writes the ``.spool`` marker
last and durably, so a folder with the marker has all its folders. A root writable by every
user, or on a network filesystem, is refused (``refuse_unsafe_root``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from spool.base.errors import SpoolError
from spool.disk.fsio import fs
from spool.disk.layout import FOLDERS, FORMAT, MARKER

__all__ = ["init_spool", "is_group_shared", "refuse_network_filesystem", "refuse_unsafe_root"]

_NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "ceph", "glusterfs", "lustre"}


def init_spool(root: str | os.PathLike[str], *, group_shared: bool = False) -> Path:
    """Create a spool's layout; refuse a non-empty folder that is not a spool. Idempotent."""
    path = Path(root)
    # setgid on group-shared folders, so every file keeps the spool's group.
    mode = 0o2770 if group_shared else 0o700
    try:
        fs.make_dir(str(path), mode)
    except FileExistsError:
        _refuse_occupied(path)
    refuse_network_filesystem(path)
    root_fd = fs.open_dir(str(path))
    try:
        for folder in FOLDERS:
            try:
                fs.make_dir(folder, mode, dir_fd=root_fd)
            except FileExistsError:
                continue
            if group_shared:  # the umask (0o077 in the CLI) narrowed what mkdir made
                folder_fd = fs.open_dir(folder, dir_fd=root_fd)
                fs.set_mode(folder_fd, mode)
                fs.close(folder_fd)
        if group_shared:
            fs.set_mode(root_fd, mode)
        if not fs.exists(root_fd, MARKER):
            # The marker goes last and durably: a spool with a marker has all its folders.
            fs.write_new(root_fd, MARKER, f"spool_format: {FORMAT}\n".encode(), sync=True)
        fs.fsync_dir(root_fd)
    finally:
        fs.close(root_fd)
    return Path(os.path.realpath(path))


def _refuse_occupied(path: Path) -> None:
    """``init`` found something at ``path``: go on only with a folder (never a symlink to one)
    that is a spool already or is empty."""
    try:
        dir_fd = fs.open_dir(str(path))
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SpoolError(f"{path}: exists and is not a folder") from None
        raise
    try:
        if not fs.exists(dir_fd, MARKER) and fs.list_dir(dir_fd):
            raise SpoolError(f"{path}: folder is not empty and is not a spool; refusing to init here")
    finally:
        fs.close(dir_fd)


def is_group_shared(root: Path) -> bool:
    return bool(os.stat(root).st_mode & 0o020)


def refuse_unsafe_root(root: Path) -> None:
    """A spool writable by others could be fed symlinks and forged jobs: refuse it."""
    info = os.stat(root)
    if info.st_mode & 0o002:
        raise SpoolError(f"{root}: writable by every user (mode {oct(info.st_mode & 0o777)}); chmod o-w it")
    refuse_network_filesystem(root)


def refuse_network_filesystem(path: Path) -> None:
    """link/rename can lie on NFS, locks are unreliable and inotify is blind: refuse."""
    fstype = _filesystem_type(Path(os.path.realpath(path)))
    if fstype in _NETWORK_FILESYSTEMS:
        raise SpoolError(f"{path}: on a {fstype} filesystem; a spool must be on a local filesystem (use the API)")


def _filesystem_type(path: Path) -> str | None:
    best, best_type = "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount_point = parts[1].replace("\\040", " ")
                if (str(path) + "/").startswith(mount_point.rstrip("/") + "/") and len(mount_point) >= len(best):
                    best, best_type = mount_point, parts[2]
    except OSError:
        return None
    return best_type
