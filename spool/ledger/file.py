"""The ledger's file: find it, create it, open it, move it aside, and type SQLite's errors.

``ledger.sqlite3`` has two side files SQLite names after it, ``-wal`` and ``-shm``, and finds them
by name. Two rules keep a ledger replaced under running processes from being corrupted:

- a new ledger file is created only under ``locks/ledger.lock``, after removing side files left
  by a deleted one (a new database must never adopt an old WAL or WAL index), and a ledger is
  moved aside (with its side files) under the same lock;
- no connection deletes side files when it closes (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE). Without
  it, the last process closing a connection to a ledger moved aside or deleted would delete the
  *new* ledger's -wal and -shm, which carry the same names, from under the processes using them.

These files bypass ``fsio`` on purpose: SQLite does their I/O anyway, and they are not durable
state (nothing in them is lost that the files can't rebuild).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sqlite3
from pathlib import Path

from spool.base.errors import DiskFull, LedgerError, LedgerUnusable, SpoolError
from spool.disk.fsio import fs
from spool.disk.layout import LEDGER_NAME, Layout, ledger_aside_name, ledger_file_names, ledger_lock_name
from spool.base.lazylog import lazy_logger
from spool.disk.locks import acquire

_NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE

log = lazy_logger("spool.ledger")


def identity(root_fd: int) -> tuple[int, int] | None:
    """(device, inode) of the file now named ledger.sqlite3, or None when there is none."""
    info = fs.lstat(root_fd, LEDGER_NAME)
    return None if info is None else (info.st_dev, info.st_ino)


def create(layout: Layout) -> None:
    """Create an empty ledger file with the spool's file mode (0660 group-shared), unless one
    appeared meanwhile; SQLite writes its header on first use."""
    with acquire(layout.fd("locks"), ledger_lock_name(), blocking=True):
        if identity(layout.root_fd) is not None:
            return
        for side in ledger_file_names()[1:]:  # a deleted ledger's: no new database may adopt them
            try:
                os.unlink(side, dir_fd=layout.root_fd)
            except FileNotFoundError:
                pass
        try:
            fd = os.open(
                LEDGER_NAME,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                fs.file_mode,
                dir_fd=layout.root_fd,
            )
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"no space left on the spool's filesystem: can't create {LEDGER_NAME}") from err
            raise LedgerError(f"cannot create {layout.ledger_path} ({err.strerror})") from err
        os.close(fd)


def set_aside(layout: Layout, now: float) -> str | None:
    """Rename an unusable ledger and its side files to ``ledger.sqlite3.corrupt-<time>[-wal|-shm]``
    beside it; the next use creates a fresh one. Returns the new name (None if there was none)."""
    with acquire(layout.fd("locks"), ledger_lock_name(), blocking=True):
        if identity(layout.root_fd) is None:
            return None
        n = 1
        aside = ledger_aside_name(now, n)
        while fs.lstat(layout.root_fd, aside) is not None:
            n += 1
            aside = ledger_aside_name(now, n)
        for name, moved in zip(ledger_file_names(), ledger_file_names(aside)):
            try:
                os.rename(name, moved, src_dir_fd=layout.root_fd, dst_dir_fd=layout.root_fd)
            except FileNotFoundError:
                pass
    return aside


def open_db(where: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection to an existing file: ``mode=rw`` never lets SQLite create one behind our back
    (a ledger deleted between our stat and its open is created by ``create`` instead)."""
    modes = ["mode=ro", "immutable=1"] if read_only else ["mode=rw"]
    for i, mode in enumerate(modes):
        try:
            db = sqlite3.connect(
                f"file:{where}?{mode}", uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA busy_timeout = 30000")
            if read_only:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # can it map the WAL index?
        except sqlite3.Error:
            if i == len(modes) - 1:
                raise
            continue
        keep_side_files_on_close(db)
        return db
    raise AssertionError("unreachable")


def prepare(db: sqlite3.Connection) -> None:
    """WAL mode, synchronous=NORMAL: a ledger commit need not survive a power cut (the files are
    the truth, and the ledger is rebuilt from them; docs/reliability.md)."""
    if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
        raise LedgerError("the ledger needs WAL mode (is the spool on a network filesystem?)")
    db.execute("PRAGMA synchronous = NORMAL")


def fix_mode(root_fd: int) -> None:
    """A ledger made before it was created with the spool's mode (SQLite's own 0644 under the
    umask: 0640 in a group-shared spool) is given it, with its side files, by its owner."""
    for name in ledger_file_names():
        info = fs.lstat(root_fd, name)
        if info is not None and info.st_uid == os.geteuid() and info.st_mode & 0o777 != fs.file_mode:
            try:
                os.chmod(name, fs.file_mode, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                pass  # not ours to fix after all (or a read-only mount): SQLite says what fails


def keep_side_files_on_close(db: sqlite3.Connection) -> None:
    """SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (see the module doc). Python 3.12 has setconfig; 3.11
    reaches sqlite3_db_config through ctypes, after checking it holds the right handle."""
    setconfig = getattr(db, "setconfig", None)
    if setconfig is not None:
        setconfig(_NO_CKPT_ON_CLOSE, True)
        return
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        named = lib.sqlite3_db_filename(handle, b"main")
        if not handle or named is None or os.fsdecode(named) != db.execute("PRAGMA database_list").fetchone()[2]:
            return
        lib.sqlite3_db_config.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.sqlite3_db_config(handle, _NO_CKPT_ON_CLOSE, 1, None)
    except (OSError, AttributeError, ImportError, sqlite3.Error):  # pragma: no cover (another Python)
        log.warning("can't keep SQLite from deleting the ledger's -wal/-shm on close (NO_CKPT_ON_CLOSE)")


def close_quietly(db: sqlite3.Connection) -> None:
    try:
        db.close()
    except sqlite3.Error:
        pass


def typed(err: sqlite3.Error, path: Path, root_fd: int) -> SpoolError:
    """SQLITE_FULL (or an I/O error on a nearly full disk) is DiskFull, exit 75; a file that is
    not a database is LedgerUnusable; anything else LedgerError. Never a raw sqlite3 error."""
    code = getattr(err, "sqlite_errorcode", 0) & 0xFF
    try:
        info = os.fstatvfs(root_fd)
        nearly_full = info.f_bavail * info.f_frsize < 1 << 20
    except OSError:
        nearly_full = False
    if code == sqlite3.SQLITE_FULL or (code == sqlite3.SQLITE_IOERR and nearly_full):
        return DiskFull(f"no space left on the spool's filesystem: the ledger can't be written ({err})")
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return LedgerUnusable(
            f"the ledger {path} is unreadable ({err}); `spool fsck --repair` rebuilds it "
            "from the files (a running coordinator does so by itself)"
        )
    return LedgerError(f"ledger: {err}")
