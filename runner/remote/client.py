"""The remote worker's HTTPS client: stdlib ``http.client`` over ``ssl``, one keep-alive connection.

Why the standard library: four JSON POSTs to one host need no more, and a worker host then
needs nothing beyond spool's own dependencies. The context is ``ssl.create_default_context``:
it verifies the certificate against the system's CAs (or ``--cacert``) and the host name, and
refuses TLS below 1.2. The token goes in the Authorization header only, never in a URL or a log.

``call`` answers a ``Reply`` for every HTTP answer (the caller decides what a status means) and
raises ``Unreachable`` when no answer came (refused, reset, timed out, a 502/503/504 from a proxy
in front); ``CertificateRefused`` when the server's certificate does not verify, which no retry
can fix. A keep-alive connection the server closed while idle is reopened once, silently.

A hostile or broken server can't hold the worker: a reply over ``MAX_REPLY_BYTES`` (a lease:
that plus the worker's ``max_parent_results_bytes``, for its parents' results) is cut (its bytes
are never all read into memory), and a whole exchange (connect, send, the answer to its last
byte) is cut once its timeout has passed, however slowly the bytes trickle in (the socket's own
timeout only bounds the wait for each next byte). Both raise ``Unreachable``. A redirect is
an answer like any other: never followed.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spool.base.errors import SpoolError, UsageError

USER_AGENT = "spool-remote-worker"
_GATEWAY = (502, 504)  # a proxy's "the server behind me is down"
HURRY_CHECK_SECONDS = 0.05  # how soon a backoff's wait notices it must end (a stop)
MAX_REPLY_BYTES = 8 * 1024 * 1024  # a lease (its args) or a short answer; far more is not spool


class Unreachable(Exception):
    """No answer from the server (yet): retry with a backoff."""


class CertificateRefused(SpoolError):
    """The server's certificate did not verify against the trusted CAs (``--cacert``)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the JSON document, or None (204, or a body that is not JSON)

    def error(self) -> str:
        """The server's own words for a failure: ``{"error", "where"}``, as one short line (it goes
        into the worker's log: a server can't forge log lines with newlines or bury it in bytes)."""
        if isinstance(self.body, dict) and "error" in self.body:
            where = self.body.get("where")
            return _one_line(f"{self.body['error']}" + (f" (at {where})" if where else ""))
        return f"HTTP {self.status}"


class ApiClient:
    def __init__(self, url: str, token: str, cacert: str | None = None, *, token_from: str = "--token") -> None:
        """``token_from`` names where the token came from (``--token-file FILE``), for its error."""
        try:
            parsed = urllib.parse.urlsplit(url)
            port = parsed.port or 443
        except ValueError as err:  # an unbalanced "[", a port that is not a number
            raise UsageError(f"--server {redacted(url)!r}: not a URL ({err})") from None
        if parsed.scheme != "https" or not parsed.hostname:
            raise UsageError(f"--server {redacted(url)!r}: expected an https:// URL (the API speaks HTTPS only)")
        if parsed.query or parsed.fragment or parsed.username or parsed.password:
            shown = redacted(url)
            raise UsageError(f"--server {shown!r}: give the server's address only (no query, fragment or user)")
        if not token or any(c.isspace() for c in token):
            lines = len(token.splitlines())
            found = f" (found {lines} lines)" if lines > 1 else ""
            raise UsageError(f"{token_from}: expected the one-line token `spool token add` printed{found}")
        self.url = f"https://{parsed.netloc}{parsed.path.rstrip('/')}"
        self._host, self._port, self._base = parsed.hostname, port, parsed.path.rstrip("/")
        try:
            self._context = ssl.create_default_context(cafile=cacert)
        except (OSError, ssl.SSLError) as err:
            raise UsageError(f"--cacert {cacert}: cannot load it ({err})") from None
        self._context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self._conn: http.client.HTTPSConnection | None = None
        self._aborted = False  # abort() ended the call in flight: no silent retry of it
        self._in_flight = False
        self._calls = 0  # which call a deadline's timer belongs to
        self._timed_out = False

    def call(
        self, path: str, body: dict[str, Any], *, timeout_seconds: float, max_reply_bytes: int = MAX_REPLY_BYTES
    ) -> Reply:
        """POST ``body`` as JSON to ``path`` (under the server's URL) and read the answer, cut
        past ``max_reply_bytes`` (a lease with its parents' results may be allowed more)."""
        data = json.dumps(body, allow_nan=False).encode()
        self._aborted, self._in_flight, self._timed_out = False, True, False
        self._calls += 1
        deadline = threading.Timer(timeout_seconds, self._time_out, (self._calls,))
        deadline.daemon = True
        deadline.start()
        try:
            return self._exchange(path, data, timeout_seconds, max_reply_bytes)
        except Unreachable:
            if self._timed_out:
                raise Unreachable(f"{self.url}: no whole answer within {timeout_seconds:g} s") from None
            raise
        finally:
            deadline.cancel()
            self._in_flight = False

    def _time_out(self, call: int) -> None:
        """The deadline of call number ``call`` passed: cut it, if it is still the one in flight."""
        if call == self._calls and self._in_flight:
            self._timed_out = True
            self.abort()

    def _exchange(self, path: str, data: bytes, timeout_seconds: float, max_reply_bytes: int) -> Reply:
        for first in (True, False):
            conn, reused = self._connection(timeout_seconds)
            try:
                conn.request("POST", self._base + path, body=data, headers=self._headers)
                response = conn.getresponse()
                raw = response.read(max_reply_bytes + 1)
                if len(raw) <= max_reply_bytes and (response.length or self._aborted):
                    raise http.client.IncompleteRead(raw, response.length)  # cut short (read(n) won't say)
            except ssl.SSLCertVerificationError as err:
                self.close()
                raise CertificateRefused(f"{self.url}: its certificate does not verify: {err.verify_message}") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as err:
                self.close()
                if first and reused and not self._aborted:
                    continue  # RACE: the server closed our idle keep-alive connection as we sent
                raise Unreachable(f"{self.url}: {type(err).__name__}: {err}") from None
            except (OSError, http.client.HTTPException) as err:
                self.close()
                raise Unreachable(f"{self.url}: {type(err).__name__}: {err}") from None
            if len(raw) > max_reply_bytes:
                self.close()
                raise Unreachable(f"{self.url}: an answer over {max_reply_bytes} bytes; not read further")
            if response.will_close:
                self.close()
            if response.status in _GATEWAY or (response.status == 503 and not _is_ours(raw)):
                raise Unreachable(f"{self.url}: HTTP {response.status} from a proxy in front of it")
            return Reply(response.status, _json_or_none(raw))
        raise AssertionError("unreachable: the loop returns or raises")

    def abort(self) -> None:
        """End the call in flight now, if one is (from a signal handler); it raises Unreachable."""
        if not self._in_flight:
            return
        self._aborted = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more): nothing in flight to end

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, timeout_seconds: float) -> tuple[http.client.HTTPSConnection, bool]:
        """The open connection (True: reused) with this call's timeout, or a new one."""
        if self._conn is None:
            self._conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_seconds, context=self._context
            )
            return self._conn, False
        self._conn.timeout = timeout_seconds
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout_seconds)
        return self._conn, self._conn.sock is not None


class Patience:
    """The calls of a client that runs for long (a remote worker, a dispatcher): a server that
    does not answer is said once, then retried after a backoff that doubles up to ``most``
    seconds; said again once it answers. ``quiet()`` says a cut call was our own doing (a stop
    that ``abort``ed it): nothing is logged nor waited. ``hurry()`` ends a backoff's wait early.
    ``refused`` makes the error raised for 401/403: a revoked token is for good. ``who`` names
    the caller in that error; ``log`` is the caller's logger."""

    def __init__(
        self,
        client: ApiClient,
        *,
        who: str,
        log: logging.Logger,
        refused: Callable[[str], Exception],
        quiet: Callable[[], bool],
        hurry: Callable[[], bool],
        first: float = 0.1,
        most: float = 5.0,
    ) -> None:
        self.client, self._refused, self._quiet, self._hurry = client, refused, quiet, hurry
        self._who, self._log = who, log
        self._first, self._most = first, most
        self.unreachable = False  # said once that the server does not answer
        self._backoff = 0.0

    def call(
        self, path: str, body: dict[str, Any], *, timeout_seconds: float, max_reply_bytes: int = MAX_REPLY_BYTES
    ) -> Reply | None:
        """One call; None when the server did not answer (after this call's backoff wait)."""
        try:
            reply = self.client.call(path, body, timeout_seconds=timeout_seconds, max_reply_bytes=max_reply_bytes)
        except Unreachable as err:
            if self._quiet():
                return None
            if not self.unreachable:
                self.unreachable = True
                self._log.warning("server unreachable, retrying (%s)", err)
            self.back_off()
            return None
        if self.unreachable:
            self.unreachable = False
            self._log.info("server reachable again: %s", self.client.url)
        self._backoff = 0.0
        if reply.status in (401, 403):
            raise self._refused(f"the server refused this {self._who}'s token (HTTP {reply.status}): {reply.error()}")
        return reply

    def back_off(self, most: float | None = None) -> None:
        """Wait the next step of the backoff, returning early once ``hurry()`` says so; at most
        ``most`` seconds this time (a caller that must beat a lease between two tries)."""
        self._backoff = min(max(self._backoff * 2, self._first), self._most)
        until = time.monotonic() + (self._backoff if most is None else min(self._backoff, most))
        while time.monotonic() < until and not self._hurry():
            time.sleep(min(HURRY_CHECK_SECONDS, max(until - time.monotonic(), 0.0)))


def redacted(url: str) -> str:
    """``url`` fit to echo in an error: a user and password become ``***@``, a query or fragment
    (where a token may sit) ``***``."""
    try:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.netloc.rpartition("@")[2]
    except ValueError:  # not even a URL's shape (an unbalanced "["): show nothing of it
        return "***"
    netloc = f"***@{host}" if "@" in parsed.netloc else host
    return urllib.parse.urlunsplit(
        (parsed.scheme, netloc, parsed.path, "***" if parsed.query else "", "***" if parsed.fragment else "")
    )


MAX_ERROR_CHARS = 500


def _one_line(text: str) -> str:
    """``text`` with control characters escaped, cut to ``MAX_ERROR_CHARS``."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text[: MAX_ERROR_CHARS + 1])
    return shown if len(shown) <= MAX_ERROR_CHARS else shown[:MAX_ERROR_CHARS] + "..."


def _json_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")  # NaN, Infinity: no server of ours sends them


def _is_ours(raw: bytes) -> bool:
    """A 503 from spool itself (a full disk) carries its JSON error; a proxy's does not."""
    body = _json_or_none(raw)
    return isinstance(body, dict) and "error" in body
