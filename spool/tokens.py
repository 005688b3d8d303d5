"""API tokens: who may call ``spool serve``, with which role, stored as hashes in tls/tokens.yaml.

A token is ``secrets.token_urlsafe(32)``, shown once by ``add`` and never stored: the file holds
each token's name, role, SHA-256, creation time and last use (0600, written whole in tmp/,
fsync'd, renamed over the old file, tls/ fsync'd, under locks/tls.lock so two writers never
lose each other's change). ``verify`` hashes what a caller presents and compares it with every
stored hash with ``hmac.compare_digest`` (no early exit, so timing says nothing about which
token is close). It re-reads the file whenever its identity (inode, size, times) changed, so a
``spool token revoke`` run by another process takes effect at the server's next request.

A token's name follows the worker-name grammar: a work token's name is the worker name written
into the leases it takes; a dispatch token's runners hold theirs as ``<token name>/<runner>``
(``spool dispatch``: one secret for every engine job it starts).

Last use is kept in memory by ``verify`` and written by ``flush_last_used``, which the server
calls about once a second: it writes only when a token was used that the file says was never
used, or when ``LAST_USED_WRITE_SECONDS`` (60 s) have passed since its last write, so a busy
server rewrites the file at most once a minute, not once a request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spool.base.errors import InvalidJob, UsageError
from spool.disk.fsio import fs
from spool.disk.layout import TLS, TOKENS_NAME, tls_lock_name, tmp_name, worker_lock_name
from spool.disk.locks import acquire
from spool.base.timetext import format_time, parse_time
from spool.workers import WORKER_NAME
from spool.yaml.dump import dump_yaml
from spool.yaml.safe import load_yaml

if TYPE_CHECKING:
    from spool.handle import Handle

ROLES = ("submit", "work", "dispatch", "admin")
LAST_USED_WRITE_SECONDS = 60.0
_MAX_FILE_BYTES = 4 * 1024 * 1024
_FILE_MODE = 0o600


@dataclass(frozen=True)
class TokenInfo:
    name: str
    role: str
    created: float
    last_used: float | None


@dataclass(frozen=True)
class _Entry:
    info: TokenInfo
    sha256: str


_Entries = list[_Entry]  # spelt once here: inside TokenStore, ``list`` is its method


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_token_name(name: str) -> str:
    if not WORKER_NAME.fullmatch(name):
        raise UsageError(
            f"token name {name!r}: 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
            " (a work token's name is its worker's name)"
        )
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise UsageError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    return role


class TokenStore:
    """The tokens of one spool. Safe to share between threads of one process."""

    def __init__(self, sp: Handle) -> None:
        self._sp = sp
        self._entries: _Entries = []
        self._identity: tuple[int, ...] | None = None
        self._used: dict[str, float] = {}  # sha256 -> last use not yet written
        self._used_mutex = threading.Lock()  # the loop's verify and a thread's flush share _used
        self._last_write = sp.clock.monotonic()

    # -- what the CLI asks ------------------------------------------------------------------

    def add(self, name: str, role: str) -> str:
        """A new token for ``name`` with ``role``; returns the token (shown once, never stored).
        UsageError if the name is taken (revoke it first) or the name or role is bad. A token that
        may hold leases (work, admin) names its worker, so it may not take the name of a local
        worker this spool has had: the coordinator reads that worker's freed lock as the holder's
        death, and the holder check would let one act on the other's leases."""
        check_token_name(name)
        check_role(role)
        if role != "submit" and fs.exists(self._sp.layout.fd("locks"), worker_lock_name(name)):
            raise UsageError(
                f"a local worker named {name!r} has run on this spool (locks/{worker_lock_name(name)}); "
                "a work token's name is its worker's name: pick another"
            )
        token = secrets.token_urlsafe(32)
        with self._write_lock():
            entries = self._read_entries()
            if any(entry.info.name == name for entry in entries):
                raise UsageError(f"a token named {name!r} exists; `spool token revoke {name}` first")
            info = TokenInfo(name, role, self._sp.clock.wall(), None)
            self._write(entries + [_Entry(info, token_hash(token))])
        return token

    def list(self) -> list[TokenInfo]:
        self._refresh()
        return [entry.info for entry in self._entries]

    def refuse_as_local_worker(self, name: str) -> None:
        """The other direction of ``add``'s rule: a local worker may not take the name of a token
        that may hold leases (a remote worker's), or each could act on the other's leases.
        UsageError if one exists. Every local worker checks it (``runner.worker.Worker``)."""
        if any(info.name == name and info.role != "submit" for info in self.list()):
            raise UsageError(f"--name {name}: a work token of that name exists (a remote worker's); pick another")

    def revoke(self, name: str) -> bool:
        """Remove ``name``'s token; False if there was none."""
        with self._write_lock():
            entries = self._read_entries()
            kept = [entry for entry in entries if entry.info.name != name]
            if len(kept) == len(entries):
                return False
            self._write(kept)
        return True

    # -- what the server asks ---------------------------------------------------------------

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info, or None for an unknown (or revoked) token. Compares with every
        stored hash in constant time; notes the use in memory (see ``flush_last_used``)."""
        self._refresh()
        presented = token_hash(token).encode()
        found: _Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.sha256.encode(), presented):
                found = entry
        if found is None:
            return None
        now = self._sp.clock.wall()
        with self._used_mutex:
            self._used[found.sha256] = now
        return replace(found.info, last_used=now)

    def flush_last_used(self, *, force: bool = False) -> bool:
        """Write the last uses noted since the last write, when due (module doc) or ``force``d (at
        the server's shutdown); True if written."""
        if not self._used:
            return False
        first_use = any(entry.info.last_used is None and entry.sha256 in self._used for entry in self._entries)
        if not (first_use or force) and self._sp.clock.monotonic() - self._last_write < LAST_USED_WRITE_SECONDS:
            return False
        with self._used_mutex:
            used, self._used = self._used, {}
        try:
            with self._write_lock():
                entries = self._read_entries()  # RACE: a revoke since our last read stays revoked
                marked = [
                    replace(entry, info=replace(entry.info, last_used=used[entry.sha256]))
                    if entry.sha256 in used
                    else entry
                    for entry in entries
                ]
                self._write(marked)
        except BaseException:
            with self._used_mutex:  # not written (a full disk): keep them for the next try
                self._used = {**used, **self._used}
            raise
        return True

    # -- the file ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        identity = self._file_identity()
        if identity != self._identity:
            self._entries = self._read_entries()
            self._identity = identity

    def _file_identity(self) -> tuple[int, ...] | None:
        info = fs.lstat(self._sp.layout.fd(TLS), TOKENS_NAME)
        return None if info is None else (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _read_entries(self) -> _Entries:
        try:
            data = fs.read_file(self._sp.layout.fd(TLS), TOKENS_NAME, _MAX_FILE_BYTES)
        except FileNotFoundError:
            return []
        return _decode(data)

    def _write_lock(self) -> Any:
        return acquire(self._sp.layout.fd("locks"), tls_lock_name(), blocking=True)

    def _write(self, entries: _Entries) -> None:
        write_tls_file(self._sp, TOKENS_NAME, _encode(entries))
        self._entries, self._identity = entries, self._file_identity()
        self._last_write = self._sp.clock.monotonic()


def _encode(entries: _Entries) -> bytes:
    return dump_yaml(
        {
            "tokens": [
                {
                    "name": entry.info.name,
                    "role": entry.info.role,
                    "sha256": entry.sha256,
                    "created": format_time(entry.info.created),
                    "last_used": None if entry.info.last_used is None else format_time(entry.info.last_used),
                }
                for entry in entries
            ]
        }
    )


def _decode(data: bytes) -> _Entries:
    where = f"{TLS}/{TOKENS_NAME}"
    loaded = load_yaml(data, max_bytes=_MAX_FILE_BYTES, source=where)
    rows = loaded.get("tokens") if isinstance(loaded, dict) else None
    if not isinstance(rows, list):
        raise InvalidJob(f"{where}: expected a mapping with a list 'tokens'; fix or remove the file")
    entries = []
    for index, row in enumerate(rows):
        at = f"{where}: tokens[{index}]"
        if not isinstance(row, dict) or not isinstance(row.get("sha256"), str) or len(row["sha256"]) != 64:
            raise InvalidJob(f"{at}: expected name, role, sha256 (64 hex digits), created, last_used")
        if not isinstance(row.get("name"), str) or row.get("role") not in ROLES:
            raise InvalidJob(f"{at}: a name and a role ({', '.join(ROLES)}) are needed")
        created = parse_time(row.get("created"), f"{at}.created").timestamp()
        last = row.get("last_used")
        last_used = None if last is None else parse_time(last, f"{at}.last_used").timestamp()
        entries.append(_Entry(TokenInfo(row["name"], row["role"], created, last_used), row["sha256"]))
    return entries


def write_tls_file(sp: Handle, name: str, data: bytes) -> None:
    """Publish ``tls/<name>`` durably and private: staged in tmp/ as 0600 (even in a group-shared
    spool) and fsync'd, renamed over the old one, tls/ fsync'd. A crash leaves the old file or the
    new one; a staged file it strands in tmp/ is swept with the rest of tmp/."""
    tmp_fd, tls_fd = sp.layout.fd("tmp"), sp.layout.fd(TLS)
    staged = tmp_name()
    fs.write_new(tmp_fd, staged, data, sync=True, mode=_FILE_MODE)
    try:
        fs.rename_replace(tmp_fd, staged, tls_fd, name)
    finally:
        fs.unlink(tmp_fd, staged, missing_ok=True)
    fs.fsync_dir(tls_fd)
