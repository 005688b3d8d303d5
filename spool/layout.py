"""The spool on disk: every folder, every name, and the only code that builds them.

    SPOOL/.spool                 marker: "spool_format: 1"; a folder without it is not a spool
    SPOOL/config.yaml            settings (optional)
    pending/<id>.yaml            accepted, ready or delayed; also user drops (any other name)
    waiting/<id>.yaml            depends_on not all done yet
    leased/<id>.yaml             a worker holds it; .<id>.<attempt>.hb is its heartbeat counter,
                                 .<id>.cancel a cancel request (dot-files are never jobs)
    done/<id>.yaml               completed: results/<id>.json exists
    dead/<id>.yaml               ended without a result; ``reason:`` says why
    results/<id>.json            the one result, published by link(2), never replaced
    schedules/<name>.yaml        recurring entries
    keys/<sha256(key)>           idempotency reservation: holds the job id
    locks/<id>.lock              per-job flock; key-<sha>.lock, worker-<name>.lock, coordinator.lock
    logs/<id>.<attempt>.log      an attempt's stdout and stderr
    tls/                         certificate and token hashes
    tmp/<pid>-<random>.tmp       staging for atomic writes; swept when the writer pid is gone
    ledger.sqlite3               the index (rebuildable from the files)

A job's state is the folder its file is in. If a crash ever leaves one job in two folders, the
more advanced copy wins: done > dead > leased > pending > waiting (``ADVANCEMENT``).
"""

from __future__ import annotations

import enum
import errno
import hashlib
import os
import secrets
from pathlib import Path

from spool.errors import NotASpool, SpoolError
from spool.fsio import fs

MARKER = ".spool"
FORMAT = 1
JOB_SUFFIX = ".yaml"


class State(str, enum.Enum):
    PENDING = "pending"
    WAITING = "waiting"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self in (State.DONE, State.DEAD)


# Higher wins when one job is found in two folders.
ADVANCEMENT = {State.WAITING: 0, State.PENDING: 1, State.LEASED: 2, State.DEAD: 3, State.DONE: 4}
OTHER_FOLDERS = ("results", "schedules", "keys", "locks", "logs", "tls", "tmp")
FOLDERS = tuple(s.value for s in State) + OTHER_FOLDERS
_NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "ceph", "glusterfs", "lustre"}


def job_name(job_id: str) -> str:
    return job_id + JOB_SUFFIX


def result_name(job_id: str) -> str:
    return job_id + ".json"


def key_name(key: str) -> str:
    """User keys never become file names as they are: they are hashed."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def heartbeat_name(job_id: str, attempt: int) -> str:
    return f".{job_id}.{attempt}.hb"


def cancel_name(job_id: str) -> str:
    return f".{job_id}.cancel"


def log_name(job_id: str, attempt: int) -> str:
    return f"{job_id}.{attempt}.log"


def tmp_name() -> str:
    """A staging name that says which process wrote it, so a sweep can tell it is abandoned."""
    return f"{os.getpid()}-{secrets.token_hex(6)}.tmp"


def is_ignored_name(name: str) -> bool:
    """Names the runner never reads as jobs: its own dot-files and in-progress user writes."""
    return name.startswith(".") or name.endswith(".tmp")


class Layout:
    """A spool's root and its folders, opened once as directory fds (never following symlinks)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.realpath(root))
        self._fds: dict[str, int] = {}
        try:
            self.root_fd = fs.open_dir(str(self.root))
        except FileNotFoundError:
            raise NotASpool(f"{self.root}: not a spool (no such folder); run `spool init`") from None
        except NotADirectoryError:
            raise NotASpool(f"{self.root}: not a spool (not a folder); run `spool init`") from None
        if not fs.exists(self.root_fd, MARKER):
            os.close(self.root_fd)
            raise NotASpool(f"{self.root}: not a spool; run `spool init`")

    def fd(self, folder: str | State) -> int:
        name = folder.value if isinstance(folder, State) else folder
        dir_fd = self._fds.get(name)
        if dir_fd is None:
            try:
                dir_fd = fs.open_dir(name, dir_fd=self.root_fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise SpoolError(f"{self.root / name}: is not a plain folder (a symlink?); refusing") from None
                raise
            self._fds[name] = dir_fd
        return dir_fd

    def path(self, folder: str | State, name: str = "") -> Path:
        """A path for people and messages; code works through ``fd()``."""
        sub = folder.value if isinstance(folder, State) else folder
        return self.root / sub / name if name else self.root / sub

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger.sqlite3"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    def close(self) -> None:
        for dir_fd in self._fds.values():
            os.close(dir_fd)
        self._fds.clear()
        os.close(self.root_fd)


def init_spool(root: str | os.PathLike[str], *, group_shared: bool = False) -> Path:
    """Create a spool's layout; refuse a non-empty folder that is not a spool. Idempotent."""
    path = Path(root)
    # setgid on group-shared folders, so every file keeps the spool's group.
    mode = 0o2770 if group_shared else 0o700
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not path.is_dir() or path.is_symlink():
            raise SpoolError(f"{path}: exists and is not a folder") from None
        if not (path / MARKER).exists() and any(path.iterdir()):
            raise SpoolError(f"{path}: folder is not empty and is not a spool; refusing to init here") from None
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
                os.chmod(folder_fd, mode)
                os.close(folder_fd)
        if group_shared:
            os.chmod(root_fd, mode)
        if not fs.exists(root_fd, MARKER):
            # The marker goes last and durably: a spool with a marker has all its folders.
            fs.write_new(root_fd, MARKER, f"spool_format: {FORMAT}\n".encode(), sync=True)
        fs.fsync_dir(root_fd)
    finally:
        os.close(root_fd)
    return Path(os.path.realpath(path))


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
