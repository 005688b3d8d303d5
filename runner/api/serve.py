"""``spool serve``: the app on uvicorn, HTTPS only (TLS 1.2 or newer), never plain HTTP.

The server binds its socket itself (so ``--port 0`` works and the address it prints is the one
it listens on) and hands it to uvicorn with an SSLContext from ``runner.api.tls``. Limits against
clients that hold connections open (slow-loris):

- ``http_idle_seconds`` (a setting, as are the deadlines below): an idle keep-alive connection is
  closed after 5 s;
- ``http_head_seconds``: a request's head (line and headers) must arrive whole within 10 s of the
  connection's handshake or of the previous response, however slowly it trickles (uvicorn itself
  times out neither a new connection that sends nothing nor a head that arrives a byte at a time,
  so 200 such connections would have had every other client answered 503);
- ``context.MAX_HEAD_BYTES``: a request head (request line + headers) over 16 KiB is refused (431,
  or by h11 while it is still arriving);
- ``MAX_CONNECTIONS``: past 200 open connections and tasks, uvicorn answers 503 at once; requests
  that stay open take at most ``context.MAX_HELD`` (150) of them together: long-polls 4 per token
  and 100 in all, dashboard streams 8 per token and 50 in all (429 past either), so 50 are always
  left for ``/healthz`` and the API's short calls;
- a body must arrive whole within ``http_body_seconds`` (30 s) and under its cap (413);
- the TLS handshake itself is cut after 10 s (``tls_handshake_seconds``, asyncio's own default is 60);
- a client speaking plain HTTP to the port gets a 400 saying to use https (``frontdoor``).

The access log prints the client, the method, the path and the status; no header is ever logged,
and of a query string only its field names (``?search=*&page=*``, ``redact_query``): tokens never
travel in a URL, but a client may still put one there, and a dashboard search is a user's text.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from spool.runner.api.app import create_app
from spool.runner.api.context import MAX_CONNECTIONS, MAX_HEAD_BYTES, ApiContext
from spool.runner.api.frontdoor import FrontDoor
from spool.runner.api.tls import server_context
from spool.spool import Spool
from spool.tokens import TokenStore


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port).

    ``reuse_port``: SO_REUSEPORT, so several ``spool serve`` processes of one user listen on one
    port and the kernel spreads new connections over them (the control plane's second process:
    everything they share is in the spool, the dashboard's sessions too, ``dashboard.sessions``).
    Each process still has its own caps on held requests (``context.MAX_HELD``)."""
    family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(address)
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def serve(sp: Spool, sock: socket.socket, cert: Path, key: Path, *, on_ready: Callable[[], None] | None = None) -> None:
    """Serve the API on ``sock`` until SIGINT/SIGTERM (uvicorn's own graceful shutdown)."""
    context = server_context(cert, key)
    ctx = ApiContext(sp=sp, tokens=TokenStore(sp))
    settings = sp.settings
    config = uvicorn.Config(
        create_app(ctx),
        ssl_context_factory=lambda _config, _default: context,
        timeout_keep_alive=settings.http_idle_seconds,  # type: ignore[arg-type]  # uvicorn takes a float
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        limit_concurrency=MAX_CONNECTIONS,
        http=type("HeadDeadline", (HeadDeadlineProtocol,), {"head_seconds": settings.http_head_seconds}),
        ws="none",
        lifespan="on",
        server_header=False,
        log_config=_log_config(settings.log_level),
    )
    server = uvicorn.Server(config)
    asyncio.run(_serve(server, sock, on_ready, settings.tls_handshake_seconds))


async def _serve(
    server: uvicorn.Server, sock: socket.socket, on_ready: Callable[[], None] | None, handshake_seconds: float
) -> None:
    _front_door(handshake_seconds)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if on_ready is not None and server.started:
        on_ready()
    await task


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (``head_seconds``, the
    ``http_head_seconds`` setting, set on a subclass by ``serve``): armed when the connection is
    made and when a response is complete, cleared once a request's head has been parsed; when it
    passes, the connection is closed."""

    head_seconds: float = 10.0
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._in_request():
            self._arm_head_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self._in_request():
            self._clear_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_head_deadline()
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_head_deadline(self) -> None:
        self._clear_head_deadline()
        self._head_deadline = self.loop.call_later(self.head_seconds, self._head_too_slow)

    def _clear_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing() and not self._in_request():
            self.transport.close()  # connection_lost then tells h11, as for any close


def _front_door(seconds: float) -> None:
    """uvicorn makes its server with ``loop.create_server(factory, sock=, ssl=)``: for the TLS
    socket, make a ``FrontDoor`` instead (plain HTTP gets a hint to use https), whose handshakes
    are cut after ``seconds`` (uvicorn passes no ``ssl_handshake_timeout``; asyncio's is 60 s)."""
    loop = asyncio.get_running_loop()
    original = loop.create_server

    async def create_server(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None and kwargs.get("sock") is not None and args:
            return FrontDoor(args[0], kwargs["sock"], kwargs["ssl"], seconds)
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", seconds)
        return await original(*args, **kwargs)

    loop.create_server = create_server  # type: ignore[method-assign]


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's loggers on stderr, one line each: errors and the access log (no headers, no
    query values); and spool's own (``spool.*``: the transitions the server runs, a runner
    fenced, whether a coordinator runs) at the ``log_level`` setting."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        },
        "filters": {"redact": {"()": RedactQuery}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False, "filters": ["redact"]},
            "spool": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }


_QUERY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")  # shorter than a token (43 characters)
QUERY_NAMES_SHOWN = 10


def redact_query(target: str) -> str:
    """A request target as the access log shows it: the path, and of the query only the field
    names, each value ``*`` (a name that could itself be a secret, ``*`` too; past
    ``QUERY_NAMES_SHOWN`` names, ``...``)."""
    path, sep, query = target.partition("?")
    if not sep:
        return path
    names = [pair.partition("=")[0] for pair in query.split("&") if pair]
    shown = [f"{name}=*" if _QUERY_NAME.fullmatch(name) else "*" for name in names[:QUERY_NAMES_SHOWN]]
    return f"{path}?{'&'.join(shown)}" + ("&..." if len(names) > QUERY_NAMES_SHOWN else "")


class RedactQuery(logging.Filter):
    """On ``uvicorn.access``: its record's arguments are (client, method, path with query, HTTP
    version, status); the third goes through ``redact_query`` before anything formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], redact_query(args[2]), *args[3:])
        return True
