"""Every filesystem call spool makes on a spool, in one narrow seam.

The durable-write recipe (docs/reliability.md, "The recipe every move follows") lives here and
nowhere else:

- a new file is created in ``tmp/`` (O_CREAT|O_EXCL|O_NOFOLLOW, 0600), written whole, fsync'd,
  then moved into place with a rename that never replaces (renameat2 RENAME_NOREPLACE), or
  published with link(2) when it must be create-exclusive with its full content (a result); a
  worker may write the content over a spare file of its own in ``tmp/`` instead of creating one
  (``rewrite_spare``), and swap a rewritten job file in (``rename_exchange``): no file freed;
- the directory that gained a name is fsync'd before anyone is told;
- a failed fsync raises ``DurabilityError`` and is never retried: the kernel may already have
  dropped the pages, so a second fsync that succeeds would be a lie;
- ENOSPC raises ``DiskFull``.

All calls work on directory file descriptors opened once with O_NOFOLLOW, so no symlink inside
the spool is ever followed. Tests swap ``fs`` for a subclass that records or injects faults over
the real calls (the power-loss model and the I/O-error tests) with ``use``; nothing else may
call ``os`` on spool files directly: locks, ``init`` and the config read come through here too.
(The ledger's own files are SQLite's to read and write; ``spool.ledger.file`` says why.)
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from typing import Any

from spool.disk import linux
from spool.disk.lockcalls import LockCalls
from spool.base.errors import DiskFull, DurabilityError, InvalidJob

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RealFS(LockCalls):
    """The real filesystem. Each method is one step a power cut can separate from the next."""

    def __init__(self) -> None:
        self.file_mode = 0o600  # 0o660 in a group-shared spool (set by Spool when it opens one)
        self._renameat2 = None
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            self._renameat2 = fn
        except AttributeError:  # glibc older than 2.28: fall back to link + unlink
            pass
        self._syncfs = linux.load_syncfs()

    # -- directories -------------------------------------------------------------------------

    def open_dir(self, path: str, dir_fd: int | None = None) -> int:
        return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)

    def make_dir(self, name: str, mode: int, dir_fd: int | None = None) -> None:
        os.mkdir(name, mode, dir_fd=dir_fd)

    def list_dir(self, dir_fd: int) -> list[str]:
        return os.listdir(dir_fd)

    def fsync_dir(self, dir_fd: int) -> None:
        """Make the names in a directory durable. A failure is final (see module doc)."""
        try:
            os.fsync(dir_fd)
        except OSError as err:
            raise DurabilityError(f"fsync of a spool directory failed: {err.strerror}") from err

    def syncfs(self, dir_fd: int) -> bool:
        """Make everything written so far on the filesystem holding ``dir_fd`` durable, data and
        names, in one call (Linux syncfs(2)): a batch's one sync instead of an fsync per file.

        False, having done nothing, where there is no such call or it can't be trusted (a kernel
        before 5.8, whose syncfs never reported a failed write; a filesystem not known to sync
        everything, such as FUSE; a sandbox refusing it): the caller fsyncs each file instead. A
        failure is final, as a failed fsync's: ``DurabilityError``, never retried. It may also be a
        write error of another file on the same filesystem since ``dir_fd`` was opened: a false
        alarm, on the safe side."""
        if self._syncfs is None or not linux.syncs_everything(dir_fd):
            return False
        if self._syncfs(dir_fd) == 0:
            return True
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EPERM):  # not a result of syncing: the call is not there
            self._syncfs = None
            return False
        raise DurabilityError(f"syncfs of the spool's filesystem failed: {os.strerror(code)}")

    def fsync_file(self, dir_fd: int, name: str) -> None:
        """fsync a file written earlier without it (``write_new(sync=False)``), by name: the
        fallback where ``syncfs`` is missing. A failure is final (see module doc)."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            _fsync_or_fail(fd, name)
        finally:
            os.close(fd)

    # -- files -------------------------------------------------------------------------------

    def write_new(self, dir_fd: int, name: str, data: bytes, *, sync: bool, mode: int | None = None) -> None:
        """Create ``name`` exclusively, write all of ``data``, fsync it if ``sync``. ``mode``
        (default the spool's ``file_mode``) is for a private file, such as the API's keys."""
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                self.file_mode if mode is None else mode,
                dir_fd=dir_fd,
            )
        except OSError as err:
            _raise_disk_full(err)
            raise
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                _fsync_or_fail(fd, name)
        except OSError as err:
            os.close(fd)
            self.unlink(dir_fd, name, missing_ok=True)
            _raise_disk_full(err)
            raise
        except BaseException:
            os.close(fd)
            self.unlink(dir_fd, name, missing_ok=True)
            raise
        os.close(fd)

    def overwrite_small(self, dir_fd: int, name: str, data: bytes) -> None:
        """A runner dot-file (heartbeat, cancel request): no fsync, rewritten in place, as O_TRUNC
        cost a writeback and a trim on ext4 (docs/performance.md); a reader may catch it mid-write."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.file_mode, dir_fd=dir_fd)
        try:
            if os.fstat(fd).st_size > len(data):
                os.ftruncate(fd, len(data))
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def rewrite_spare(self, dir_fd: int, name: str, data: bytes, *, sync: bool) -> bool:
        """Write ``data`` over a spare file (``spool.moves.spares``) from its start and cut it to
        that length, fsync'd if ``sync``: a staged file without a file created (or, later, freed).
        False, having written nothing, when what is under the name is no longer the spare a worker
        kept (gone, not a regular file, a second link, another owner or mode): the caller removes
        it and stages a new file instead."""
        try:
            fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
                return False
            if stat.S_IMODE(info.st_mode) != self.file_mode:
                return False
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, len(data) - len(view)) :]
            if info.st_size > len(data):
                os.ftruncate(fd, len(data))
            if sync:
                _fsync_or_fail(fd, name)
        except OSError as err:
            _raise_disk_full(err)
            raise
        finally:
            os.close(fd)
        return True

    def touch(self, dir_fd: int, name: str) -> None:
        """Open ``name`` for writing (made empty when missing) and close it, changing nothing: an
        inotify watcher of the folder sees IN_CLOSE_WRITE (a wake-up hint, ``.wake``) and no
        truncate dirties the inode. A FIFO planted there fails (ENXIO), never blocks the caller."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        os.close(os.open(name, flags, self.file_mode, dir_fd=dir_fd))

    def read_file(
        self, dir_fd: int, name: str, max_bytes: int, *, single_link: bool = False, settled: bool = False
    ) -> bytes:
        """Read a regular file without following a symlink or blocking on a FIFO.

        Raises ``InvalidJob`` for a symlink, a non-regular file, a second hard link (when asked)
        or a file over ``max_bytes``; ``FileNotFoundError`` when the name is gone. With
        ``settled``, raises ``BlockingIOError`` while some process still has the file open for
        writing (a user writing a drop in place): the kernel refuses a read lease then."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise InvalidJob(f"{name}: is a symbolic link") from None
            if err.errno == errno.ENXIO:  # a socket (or a device with nothing behind it): open(2) refuses it
                raise InvalidJob(f"{name}: not a regular file") from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidJob(f"{name}: not a regular file")
            if single_link and info.st_nlink != 1:
                raise InvalidJob(f"{name}: has {info.st_nlink} hard links")
            if settled:
                linux.refuse_if_being_written(fd, name)
            if info.st_size > max_bytes:
                raise InvalidJob(f"{name}: {info.st_size} bytes, over the limit of {max_bytes}")
            data = _read_at_most(fd, max_bytes + 1, size=info.st_size)
            if len(data) > max_bytes:
                raise InvalidJob(f"{name}: over the limit of {max_bytes} bytes")
            return data
        finally:
            os.close(fd)

    def open_log(self, dir_fd: int, name: str) -> int:
        """Open (create) an attempt log to append to and read back; OSError for anything but a
        regular file (a symlink is ELOOP, never followed; a FIFO can't block the open)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, self.file_mode, dir_fd=dir_fd)
        except OSError as err:
            _raise_disk_full(err)
            raise
        return _regular_or_close(fd, name)

    def append(self, fd: int, data: bytes) -> None:
        """Write all of ``data`` to a file opened by ``open_log`` (O_APPEND). No fsync: a log is
        diagnostics. A failure is the plain OSError (ENOSPC too): its caller stops that log."""
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def open_for_reading(self, dir_fd: int, name: str) -> int:
        """Open a regular file to read in chunks (never following a symlink); OSError otherwise."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
        return _regular_or_close(fd, name)

    def read_small(self, path: str, max_bytes: int) -> bytes | None:
        """Read at most ``max_bytes`` of the file at ``path`` (a spool's config.yaml), never
        following a symlink nor blocking on a FIFO; None when it is not a regular file. OSError
        when it can't be opened or read (FileNotFoundError when there is none)."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return _read_at_most(fd, max_bytes)
        finally:
            os.close(fd)

    def lstat(self, dir_fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def exists(self, dir_fd: int, name: str) -> bool:
        return self.lstat(dir_fd, name) is not None

    # -- names -------------------------------------------------------------------------------

    def rename_noreplace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        """Move a name; raise FileExistsError rather than replace, FileNotFoundError if gone.

        The fallback (link, then unlink) can leave the inode under both names if we die
        between the two; recovery keeps the more advanced state (done > dead > leased > pending >
        waiting: ``layout.ADVANCEMENT``)."""
        if self._renameat2 is not None:
            if self._renameat2(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
                return
            code = ctypes.get_errno()
            if code not in (errno.EINVAL, errno.ENOSYS):
                err = OSError(code, os.strerror(code), dst)
                _raise_disk_full(err)  # a folder that must grow a block can be full too
                raise err
        try:
            os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except OSError as err:
            _raise_disk_full(err)
            raise
        os.unlink(src, dir_fd=src_fd)

    def rename_replace(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        """Atomically replace ``dst`` (a job file rewritten in place, under its lock)."""
        try:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError as err:
            _raise_disk_full(err)
            raise

    def rename_exchange(self, src_fd: int, src: str, dst_fd: int, dst: str) -> bool:
        """Swap two names in one step (renameat2 RENAME_EXCHANGE): ``dst`` names ``src``'s file and
        ``src`` the file ``dst`` named, and neither is freed. False, having done nothing, where the
        kernel or the filesystem has no exchange, or a name is missing: the caller replaces
        (``rename_replace``, which then does what it always did)."""
        if self._renameat2 is None:
            return False
        if self._renameat2(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_EXCHANGE) == 0:
            return True
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOENT):
            return False
        err = OSError(code, os.strerror(code), dst)
        _raise_disk_full(err)
        raise err

    def link(self, src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        """Publish ``src`` under ``dst``; FileExistsError means someone else's name is there."""
        try:
            os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except OSError as err:
            _raise_disk_full(err)
            raise

    def unlink(self, dir_fd: int, name: str, *, missing_ok: bool = False) -> None:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            if not missing_ok:
                raise


def _regular_or_close(fd: int, name: str) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", name)
    os.set_blocking(fd, True)
    return fd


def _fsync_or_fail(fd: int, name: str) -> None:
    """fsync a file being written; a failure is final (see module doc)."""
    try:
        os.fsync(fd)
    except OSError as err:
        raise DurabilityError(f"fsync of {name} failed: {err.strerror}") from err


def _raise_disk_full(err: OSError) -> None:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DiskFull("no space left on the spool's filesystem; nothing was accepted") from err


_METHODS = tuple(name for name in dir(RealFS) if not name.startswith("_") and callable(getattr(RealFS, name)))


class Seam:
    """The one object every module calls (``from spool.disk.fsio import fs``); ``use`` changes what is
    behind it, so a swap reaches every caller at once. It keeps the implementation's methods bound, a
    slot each: a call costs no ``__getattr__`` (~0.45 us, ~35 calls a job). So swap only with ``use``
    or set a method on ``fs`` (bound anew); one patched on the class after ``use`` is not seen."""

    __slots__ = ("_impl", *_METHODS)

    def __init__(self, impl: RealFS) -> None:
        self._bind(impl)

    def _bind(self, impl: RealFS) -> None:
        for name in ("_impl", *_METHODS):
            object.__setattr__(self, name, impl if name == "_impl" else getattr(impl, name))

    def __getattr__(self, name: str) -> Any:  # not a method: ``file_mode``; never ``__dict__``
        if name.startswith("_"):
            raise AttributeError(f"the fs seam has no {name}: swap it with spool.disk.fsio.use")
        return getattr(object.__getattribute__(self, "_impl"), name)

    def __setattr__(self, name: str, value: object) -> None:
        impl = object.__getattribute__(self, "_impl")
        setattr(impl, name, value)
        self._bind(impl)


def use(impl: RealFS) -> RealFS:
    """Put ``impl`` (a recording or fault-injecting RealFS subclass) behind ``fs``; returns the
    one it replaces, to put back."""
    previous, impl.file_mode = _seam._impl, _seam._impl.file_mode
    _seam._bind(impl)
    return previous


_seam = Seam(RealFS())
fs: RealFS = _seam  # type: ignore[assignment]  # it delegates every RealFS method


def _read_at_most(fd: int, limit: int, size: int = -1) -> bytes:
    """Up to ``limit`` bytes from ``fd``'s position to its end, in 64 KiB reads. ``size``: what
    fstat said a regular file read from its start holds; a short read that brings exactly that
    much is its end (no read of nothing to hear it: one read per small file, not two)."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        asked = min(remaining, 1 << 16)
        chunk = os.read(fd, asked)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
        if len(chunk) < asked and limit - remaining == size:
            break
    return b"".join(chunks)
