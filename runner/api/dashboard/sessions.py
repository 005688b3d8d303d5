"""The dashboard's sessions, kept where every ``spool serve`` of the spool finds them.

Several servers may serve one spool (``spool serve --reuse-port`` on one port, or one per port
behind a proxy), and a browser's next request may reach any of them, so a session lives in
``tls/sessions.sqlite3`` (0600, beside the token hashes), not in one process's memory. A row holds
the SHA-256 of the session id (the cookie's value; a copy of the file opens no session), the
token's name, role and creation time, the CSRF token, and the expiry.

Expiry is on the monotonic clock, which every process of one boot shares, with the boot's id
beside it: a session of an earlier boot has expired, whatever its number says. So a server
restarted on the same boot keeps its users logged in (8 hours at most), and a reboot logs
everyone out. Every request still checks that the session's token is the one in
``tls/tokens.yaml``, so ``spool token revoke`` ends its sessions at their next request, on every
server.

The caps hold over all the servers together, each decided in one ``BEGIN IMMEDIATE``
transaction: a token holds at most ``SESSIONS_PER_TOKEN`` sessions (its next login ends its own
oldest, never another token's); the table holds at most ``MAX_SESSIONS`` live ones (a login past
that is refused and nobody is logged out). The file is a cache of logins, not the spool's state:
deleting it logs everyone out and loses nothing else.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spool.tokens import TokenStore

SESSION_SECONDS = 8 * 3600
SESSIONS_PER_TOKEN = 5  # a few browsers; the oldest goes at the next login
MAX_SESSIONS = 10_000  # reached only by 2,000 tokens logged in 5 times each
BUSY_MS = 5_000  # another server's login holds the table for microseconds; wait this long at most

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- login order: a token's oldest session goes first
    id_sha256 TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    token_created REAL NOT NULL,
    csrf TEXT NOT NULL,
    expires REAL NOT NULL,  -- on the monotonic clock of boot ``boot``
    boot TEXT NOT NULL
)
"""


class SessionsFull(Exception):
    """Every session the servers keep is live and another token's: a login must wait."""


@dataclass(frozen=True)
class Session:
    name: str  # the token's name
    role: str
    token_created: float  # tells a token apart from a later one added under the same name
    csrf: str
    expires: float  # on the monotonic clock

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def boot_id() -> str:
    """This boot's id (Linux), under which monotonic times compare; '' where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""


class Sessions:
    """Session id -> Session, in ``path`` (None: in this process's memory alone, for tests)."""

    def __init__(
        self, tokens: TokenStore, path: Path | None = None, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._tokens = tokens
        self._monotonic = monotonic
        self._boot = boot_id()
        self._mutex = threading.Lock()  # one connection, shared by the server's threads
        self._db = _open(path)

    def login(self, token: str) -> tuple[str, Session] | None:
        """A new session for a valid token (its id is the cookie's value), else None. Ends the
        token's own oldest session past ``SESSIONS_PER_TOKEN``; raises ``SessionsFull`` rather
        than end another token's."""
        info = self._tokens.verify(token)
        if info is None:
            return None
        session = Session(
            info.name, info.role, info.created, secrets.token_urlsafe(32), self._monotonic() + SESSION_SECONDS
        )
        session_id = secrets.token_urlsafe(32)
        with self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._prune(session)
            self._db.execute(
                "INSERT INTO sessions(id_sha256, name, role, token_created, csrf, expires, boot) VALUES(?,?,?,?,?,?,?)",
                (_digest(session_id), *_fields(session), self._boot),
            )
        return session_id, session

    def lookup(self, session_id: str | None) -> Session | None:
        """The live session of this cookie value, or None (unknown, expired, its token revoked)."""
        if not session_id:
            return None
        with self._mutex:
            row = self._db.execute(
                "SELECT name, role, token_created, csrf, expires, boot FROM sessions WHERE id_sha256 = ?",
                (_digest(session_id),),
            ).fetchone()
        if row is None:
            return None
        name, role, token_created, csrf, expires, boot = row
        session = Session(name, role, token_created, csrf, expires)
        if boot != self._boot or expires <= self._monotonic() or not self._token_still_there(session):
            self.logout(session_id)
            return None
        return session

    def logout(self, session_id: str | None) -> None:
        with self._mutex, self._db:
            self._db.execute("DELETE FROM sessions WHERE id_sha256 = ?", (_digest(session_id or ""),))

    def _token_still_there(self, session: Session) -> bool:
        return any(
            info.name == session.name and info.role == session.role and info.created == session.token_created
            for info in self._tokens.list()
        )

    def _prune(self, new: Session) -> None:
        """Make room for ``new`` (in the caller's transaction): drop expired sessions, then the
        oldest of ``new``'s token's own until it has fewer than ``SESSIONS_PER_TOKEN``."""
        db = self._db
        db.execute("DELETE FROM sessions WHERE boot != ? OR expires <= ?", (self._boot, self._monotonic()))
        same = [
            seq
            for (seq,) in db.execute(
                "SELECT seq FROM sessions WHERE name = ? AND token_created = ? ORDER BY seq",
                (new.name, new.token_created),
            )
        ]
        ended = same[: max(0, len(same) - SESSIONS_PER_TOKEN + 1)]
        (count,) = db.execute("SELECT COUNT(*) FROM sessions").fetchone()
        if count - len(ended) >= MAX_SESSIONS:  # before ending any: a refusal changes nothing
            raise SessionsFull(f"the server holds {MAX_SESSIONS} live sessions; try again later")
        db.executemany("DELETE FROM sessions WHERE seq = ?", [(seq,) for seq in ended])


def _open(path: Path | None) -> sqlite3.Connection:
    """The sessions table at ``path``, made 0600 if new (WAL: the servers read while one writes)."""
    if path is None:
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    else:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=BUSY_MS / 1000)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # a login lost in a power cut only asks for the token again
    db.execute(SCHEMA)
    return db


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _fields(session: Session) -> tuple[str, str, float, str, float]:
    return session.name, session.role, session.token_created, session.csrf, session.expires
