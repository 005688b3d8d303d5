"""The HTTPS port's front door: a plain-HTTP client gets a one-line hint, not an empty reply.

asyncio's server hands every connection straight to TLS, and TLS can only answer a client that
speaks plain HTTP (``curl http://host:8443/``) by closing: "Empty reply from server". Here the
server accepts connections itself and peeks at each one's first byte before any handshake
(``MSG_PEEK``: nothing is consumed). A TLS client's first byte is 0x16 (a handshake record): its
connection goes to ``loop.connect_accepted_socket`` with the SSLContext, the path asyncio's own
server takes, so what follows (uvicorn's protocol, the handshake deadline) is as before. A first
byte that starts an HTTP method gets ``400`` with "this is an HTTPS port: use https://HOST:PORT/"
and is closed; anything else is closed. A connection that sends nothing is closed after the
handshake deadline, as the handshake would have been.

``serve.py`` puts this server in place of asyncio's for the TLS listening socket uvicorn is
given (``create_server(..., sock=, ssl=)``); uvicorn only closes it and waits for it to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from collections.abc import Callable

TLS_HANDSHAKE = 0x16  # the content type of a TLS record that opens a handshake
HINT_HEAD_BYTES = 4096  # of a plain request's head read (and dropped) before the hint is sent
HINT_READ_SECONDS = 1.0  # how long the head and the client's close are waited for, at most
# A Host header that is a plain name or address (and a port); anything else is not echoed back.
_HOST = re.compile(rb"^host:[ \t]*([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?[ \t]*\r?$", re.I | re.M)


class FrontDoor:
    """A listening socket's accept loop that sends TLS clients on to ``protocol_factory`` over
    ``context`` and answers plain HTTP with a hint (the part of ``asyncio.Server`` uvicorn uses:
    ``close``, ``wait_closed``, ``sockets``, ``is_serving``)."""

    def __init__(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        sock: socket.socket,
        context: ssl.SSLContext,
        handshake_seconds: float,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._factory, self._sock, self._context = protocol_factory, sock, context
        self._handshake_seconds = handshake_seconds
        self._doors: set[asyncio.Task[None]] = set()
        sock.setblocking(False)
        self._accepting = self._loop.create_task(self._accept())

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def is_serving(self) -> bool:
        return not self._accepting.done()

    def close(self) -> None:
        """Accept no more (connections already handed on are uvicorn's to close)."""
        self._accepting.cancel()
        for door in list(self._doors):
            door.cancel()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._accepting, *self._doors, return_exceptions=True)

    async def _accept(self) -> None:
        while True:
            try:
                conn, _address = await self._loop.sock_accept(self._sock)
            except (ConnectionAbortedError, BlockingIOError, InterruptedError):
                continue
            except OSError:  # the listening socket was closed (uvicorn's shutdown): no more to accept
                return
            conn.setblocking(False)
            door = self._loop.create_task(self._sort(conn))
            self._doors.add(door)
            door.add_done_callback(self._doors.discard)

    async def _sort(self, conn: socket.socket) -> None:
        """TLS on to the app, plain HTTP the hint, the rest (and a silent client) closed."""
        try:
            try:
                async with asyncio.timeout(self._handshake_seconds):
                    first = await self._peek(conn)
            except TimeoutError:
                first = b""
            if first and first[0] == TLS_HANDSHAKE:
                await self._loop.connect_accepted_socket(
                    self._factory, conn, ssl=self._context, ssl_handshake_timeout=self._handshake_seconds
                )
                return  # the transport owns the socket now: not closed here
            if first[:1].isalpha():
                await self._hint(conn)
        except (OSError, ssl.SSLError, TimeoutError):
            pass  # a failed handshake, a reset: asyncio's own server drops these without a word
        conn.close()

    async def _peek(self, conn: socket.socket) -> bytes:
        """The first byte the client sent, left in the socket (b"" if it closed first)."""
        await self._readable(conn)
        return conn.recv(1, socket.MSG_PEEK)

    async def _readable(self, conn: socket.socket) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self._loop.add_reader(conn.fileno(), wake)
        try:
            await ready
        finally:
            self._loop.remove_reader(conn.fileno())

    async def _hint(self, conn: socket.socket) -> None:
        """Read the request's head (so closing does not reset the connection before the client
        reads the answer), answer 400 with the https URL, and close once the client has it."""
        head = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HINT_READ_SECONDS):
                while b"\r\n\r\n" not in head and len(head) < HINT_HEAD_BYTES:
                    chunk = await self._loop.sock_recv(conn, HINT_HEAD_BYTES - len(head))
                    if not chunk:
                        break
                    head += chunk
        body = f"this is an HTTPS port: use https://{self._host(head, conn)}/\n".encode()
        answer = (
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
            + body
        )
        await self._loop.sock_sendall(conn, answer)
        conn.shutdown(socket.SHUT_WR)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HINT_READ_SECONDS):
                while await self._loop.sock_recv(conn, HINT_HEAD_BYTES):
                    pass  # until the client closes its side

    @staticmethod
    def _host(head: bytes, conn: socket.socket) -> str:
        """HOST:PORT: the host as the client wrote it in ``Host`` (when it is a plain name or
        address), else the address the connection came in on; the port this one's."""
        host, port = conn.getsockname()[:2]
        named = _HOST.search(head)
        if named:
            return f"{named.group(1).decode()}:{port}"
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
