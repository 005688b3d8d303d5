"""Fixtures for the API tests: a real ``spool serve`` over verified HTTPS.

- ``served``: a fresh spool with ``python -m spool.cli --spool S serve --self-signed --host
  127.0.0.1 --port 0`` running, ready once ``/healthz`` answers over HTTPS that verifies the
  certificate and the host name. It gives ``.root``, ``.url``, ``.cacert``, ``.token(name, role)``
  (runs ``spool token add``), ``.call(method, path, *, token, json, body, headers)`` -> ``Reply``,
  ``.connect()`` (an ``http.client.HTTPSConnection`` for tests that drive the wire themselves),
  ``.call_with(context)`` (a GET through a client SSLContext of the test's own),
  ``.restart()`` (SIGKILL, then the same spool and port again) and ``.log()``. The process group
  is SIGKILLed at teardown, whatever the test did.
- ``serve_spool(env=..., config=..., parent=..., cert=(cert, key))``: the same with settings of the
  test's own (``config`` is written to config.yaml before the server starts), the spool made in
  ``parent`` (a small disk) when given, ``--cert/--key`` instead of ``--self-signed`` when given;
  ``root=`` starts another server of that spool, on ``port`` (0: any), with ``serve_args`` more
  (``--reuse-port``); ``served`` is ``serve_spool()``.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import os
import signal
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from spool import Spool
from dispatch_support import Runs
from support import ROOT, SPOOL_CMD, Procs, run_spool, wait_until

START_SECONDS = 30.0


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: Any  # the JSON value, or the text when it is not JSON

    @property
    def json(self) -> Any:
        return self.body


class Served:
    """One running ``spool serve`` on its own spool."""

    def __init__(self, root: Path, logs: Path, env: dict[str, str], tls_args: list[str] | None = None) -> None:
        self.root, self.logs, self.env = root, logs, env
        self.tls_args = tls_args or ["--self-signed"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.host, self.port = "127.0.0.1", 0
        self.cacert = root / "tls" / "cert.pem"
        self._starts = 0

    # -- the process --------------------------------------------------------------------------

    def start(self, port: int = 0) -> None:
        self._starts += 1
        out = self.logs / f"serve-{self._starts}.out"
        err = open(self.logs / f"serve-{self._starts}.log", "wb")
        with open(out, "wb") as stdout:
            argv = [
                *SPOOL_CMD,
                "--spool",
                str(self.root),
                "serve",
                *self.tls_args,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            self.proc = subprocess.Popen(
                argv, stdout=stdout, stderr=err, env={**os.environ, **self.env}, cwd=ROOT, start_new_session=True
            )
        err.close()

        def listening() -> str | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"spool serve exited {self.proc.returncode}:\n{self.log()}")
            for line in out.read_text(errors="replace").splitlines():
                if line.startswith("listening on "):
                    return line.split()[-1]
            return None

        self.url = str(wait_until(listening, timeout=START_SECONDS, message="spool serve to listen"))
        parts = urlsplit(self.url)
        self.host, self.port = str(parts.hostname), int(parts.port or 0)
        wait_until(self._healthy, timeout=START_SECONDS, message="/healthz over HTTPS")

    def _healthy(self) -> bool:
        try:
            return self.call("GET", "/healthz", timeout=2.0).status == 200
        except (OSError, http.client.HTTPException):
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()

    def restart(self) -> None:
        """SIGKILL the server and start it again on the same spool and port."""
        self.kill()
        self.start(self.port)

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in sorted(self.logs.glob("serve-*")))

    # -- clients ------------------------------------------------------------------------------

    def token(self, name: str, role: str) -> str:
        ran = run_spool("token", "add", name, "--role", role, spool=self.root)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.split()[-1]

    def context(self) -> ssl.SSLContext:
        """A client context that trusts only this server's certificate and checks the host name."""
        return ssl.create_default_context(cafile=str(self.cacert))

    def connect(self, timeout: float = 30.0, context: ssl.SSLContext | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=context or self.context())

    def call_with(self, context: ssl.SSLContext, path: str = "/healthz") -> Reply:
        """GET ``path`` through a client context of the test's own (another CA, an old TLS)."""
        connection = self.connect(10.0, context)
        try:
            connection.request("GET", path)
            return read_reply(connection.getresponse())
        finally:
            connection.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if json is not None:
            body = jsonlib.dumps(json).encode()
            sent.setdefault("Content-Type", "application/json")
        connection = self.connect(timeout)
        try:
            connection.request(method, path, body=body, headers=sent)
            return read_reply(connection.getresponse())
        finally:
            connection.close()


def read_reply(response: http.client.HTTPResponse) -> Reply:
    data = response.read()
    headers = {name.lower(): value for name, value in response.getheaders()}
    try:
        value: Any = jsonlib.loads(data)
    except ValueError:
        value = data.decode(errors="replace")
    return Reply(response.status, headers, value)


@pytest.fixture
def serve_spool(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(
        env: dict[str, str] | None = None,
        config: str | None = None,
        parent: Path | None = None,
        cert: tuple[Path, Path] | None = None,
        root: Path | None = None,
        port: int = 0,
        serve_args: tuple[str, ...] = (),
    ) -> Served:
        if root is None:  # a new spool; else another server of that one
            root = (parent or tmp_path) / f"spool-{len(started)}"
            Spool.init(root, environ={}).close()
        if config is not None:
            (root / "config.yaml").write_text(config)
        logs = tmp_path / f"serve-logs-{len(started)}"
        logs.mkdir()
        tls_args = ["--cert", str(cert[0]), "--key", str(cert[1])] if cert else ["--self-signed"]
        served = Served(root, logs, env or {}, [*tls_args, *serve_args])
        if cert:
            served.cacert = cert[0]
        started.append(served)
        served.start(port)
        return served

    yield start
    for served in started:
        served.kill()


@pytest.fixture
def served(serve_spool: Callable[..., Served]) -> Served:
    return serve_spool()


@pytest.fixture
def runs(served: Served, tmp_path: Path) -> Iterator[Runs]:
    """The dispatch tests' processes (``dispatch_support.Runs``; its token "d1", role dispatch),
    SIGKILLed at teardown with the local engine's children."""
    started = Runs(served, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def served_procs(served: Served, tmp_path: Path) -> Iterator[Procs]:
    """Processes a test starts on the served spool (``support.Procs``), killed at teardown (the
    root conftest's ``procs`` runs them on ``spool_dir`` instead)."""
    started = Procs(served.root, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def browser(served: Served, tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium trusting only the served certificate (``test_dashboard_browser``'s;
    the test skips where selenium or chromium is missing), quit at teardown."""
    from test_dashboard_browser import chromium, spki_pin

    driver = chromium(tmp_path / "chromium-profile", spki_pin(served.cacert))
    try:
        yield driver
    finally:
        driver.quit()
