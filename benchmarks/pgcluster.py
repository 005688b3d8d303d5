"""A throwaway PostgreSQL cluster for the peer rows of ``benchmarks/bench.py``.

Debian's ``postgresql`` package (``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``):
the data directory goes under the folder being measured, the server listens on a unix socket in
that folder only (no TCP), with ``fsync=on`` and ``synchronous_commit=on`` (PostgreSQL's durable
defaults, set explicitly so a site-wide config cannot change them). It is stopped and removed by
``stop()``, which ``peers.py`` calls in a ``finally`` (so on Ctrl-C and on errors too).

initdb and postgres refuse to run as root. Run as root, the cluster runs as the ``postgres``
user (Debian's package makes it), else ``nobody``, through ``setpriv``; it keeps one capability,
CAP_DAC_READ_SEARCH, so it can reach a data directory under folders only root may enter (pytest's
``/tmp/pytest-of-root`` is 0700). The cluster's own folder is handed to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

from benchmarks.procs import tree

PORT = 5432  # only names the socket file: the socket is in the work folder, and TCP is off
USER = "bench"  # the cluster's superuser (trust authentication, on the unix socket only)


def bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` that has initdb and pg_ctl, if any."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found = [b for b in found if (b / "pg_ctl").exists()]
    return max(found, key=lambda b: int(b.parent.name) if b.parent.name.isdigit() else 0) if found else None


def version() -> str:
    found = bindir()
    return found.parent.name if found else "?"


def run_as() -> tuple[str, int, int] | None:
    """(name, uid, gid) of the user the cluster runs as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return name, entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists (useradd one)")


class Cluster:
    """``initdb`` + ``pg_ctl start`` under ``folder``; ``stop()`` stops it and removes the folder."""

    def __init__(self, folder: Path) -> None:
        found = bindir()
        if found is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin, self.folder = found, folder
        self.data, self.log = folder / "data", folder / "server.log"
        self.user = run_as()
        self.started = False

    def _cmd(self, *argv: str) -> list[str]:
        if self.user is None:
            return list(argv)
        name, uid, gid = self.user
        return [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            "--",
            *argv,
        ]

    def _run(self, *argv: str, timeout: float = 120) -> None:
        done = subprocess.run(self._cmd(*argv), capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{os.path.basename(argv[0])} failed: {(done.stdout + done.stderr).strip()[-1500:]}")

    def start(self) -> None:
        self.folder.mkdir(parents=True)
        if self.user is not None:
            os.chown(self.folder, self.user[1], self.user[2])
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "-A", "trust", "--no-sync", "-E", "UTF8")
        options = (
            f"-k {self.folder} -c listen_addresses='' -p {PORT} -c fsync=on -c synchronous_commit=on "
            "-c full_page_writes=on -c wal_sync_method=fdatasync"
        )
        self.started = True
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start")

    @property
    def dsn(self) -> str:
        """libpq's key=value form (psycopg); asyncpg takes the same parts as keywords."""
        return f"host={self.folder} port={PORT} user={USER} dbname=postgres"

    def postmaster(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        """The postmaster and every process it forked (backends, walwriter, checkpointer, ...)."""
        root = self.postmaster()
        return [] if root is None else tree([root])

    def stop(self) -> None:
        """Stop the server (fast, then immediate, then SIGKILL) and remove its folder."""
        if self.started and self.data.exists():
            for mode in ("fast", "immediate"):
                try:
                    self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")
                    break
                except (RuntimeError, subprocess.TimeoutExpired):
                    continue
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.started = False
