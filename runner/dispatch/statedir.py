"""A dispatcher's own state folder (not a spool: ``spool.disk.layout`` names nothing in it), which
every engine keeps: ``--engine-opt state_dir=DIR``, default ``$XDG_STATE_HOME/spool/dispatch/<label>``
(0700), holding the token file the engine jobs read (0600) and whatever the engine records."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spool.base.errors import UsageError

TOKEN_NAME = "token"


def state_folder(label: str, options: Mapping[str, str]) -> Path:
    """The engine's state folder, made 0700 if new; UsageError when it can't be."""
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    folder = Path(options.get("state_dir") or os.path.join(state_home, "spool", "dispatch", label))
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--engine-opt state_dir={folder}: {err.strerror or err}") from None
    return folder


def token_file(folder: Path, token: str, options: Mapping[str, str]) -> str:
    """Where the engine jobs read the token: ``--engine-opt token_file=PATH`` (a path the engine's
    nodes can read, kept by whoever set it up), else ``<folder>/token``, written here (0600)."""
    if options.get("token_file"):
        return options["token_file"]
    path = folder / TOKEN_NAME
    try:
        write_whole(path, token.encode(), mode=0o600)
    except OSError as err:
        raise UsageError(f"--engine-opt state_dir={folder}: {err.strerror or err}") from None
    return str(path)


def write_whole(path: Path, data: bytes, *, mode: int) -> None:
    """``path`` replaced whole: a hidden file beside it, fsync'd, renamed, the folder fsync'd."""
    folder = path.parent
    staged = folder / f".{path.name}-{os.getpid()}"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staged, path)
    fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
