"""A remote worker's secrets at the edges, through the real CLI: ``--token`` warns that ``ps`` shows
it (``--token-file`` and ``$SPOOL_TOKEN`` don't), a password in ``--server`` is never echoed, and
a token file's problem is reported as that file's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from spool import Spool
from support import ROOT, SPOOL_CMD

PS_WARNING = "--token shows the token to every user of this host"


def _worker(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``spool worker ARGS`` with no spool here (a remote worker needs none)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPOOL_")}
    return subprocess.run(
        [*SPOOL_CMD, "worker", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environ, **(env or {})},
        timeout=timeout,
    )


def _remote(served: Any, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A remote worker that runs what is ready on ``served``, then exits (``--burst``)."""
    return _worker("--server", served.url, "--cacert", str(served.cacert), "--burst", *args, env=env)


def test_a_token_on_the_command_line_is_warned_about_and_still_works(served: Any) -> None:
    token = served.token("remote-t", "work")
    ran = _remote(served, "--token", token)
    assert ran.returncode == 0, ran.stderr
    assert PS_WARNING in ran.stderr and "--token-file FILE or $SPOOL_TOKEN" in ran.stderr
    assert token not in ran.stderr


def test_a_token_from_a_file_or_the_environment_is_not_warned_about_nor_seen_by_jobs(
    served: Any, tmp_path: Path
) -> None:
    token = served.token("remote-e", "work")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    ran = _remote(served, "--token-file", str(token_file))
    assert ran.returncode == 0, ran.stderr
    assert PS_WARNING not in ran.stderr

    with Spool(served.root, environ={}) as sp:
        job_id = sp.submit("shell", {"argv": ["sh", "-c", 'echo "token=${SPOOL_TOKEN:-none}"']})
    ran = _remote(served, "--allow-shell", env={"SPOOL_TOKEN": token})
    assert ran.returncode == 0, ran.stderr
    assert PS_WARNING not in ran.stderr and "is not a setting" not in ran.stderr
    result = json.loads((served.root / "results" / f"{job_id}.json").read_text())
    assert "token=none" in json.dumps(result) and token not in json.dumps(result)  # the job never saw it


@pytest.mark.parametrize(
    "url",
    [
        "https://worker:hunter2@127.0.0.1:1",
        "http://worker:hunter2@127.0.0.1:1",
        "https://127.0.0.1:1/?password=hunter2",
        "https://worker:hunter2@127.0.0.1:99999",
    ],
)
def test_a_password_in_the_server_url_is_never_echoed(url: str) -> None:
    ran = _worker("--server", url, env={"SPOOL_TOKEN": "t"})
    assert ran.returncode == 2, ran.stderr
    assert "--server" in ran.stderr and "hunter2" not in ran.stderr and "Traceback" not in ran.stderr
    assert "***" in ran.stderr


def test_a_two_line_token_file_is_reported_as_that_files_problem(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-line\nsecond-line\n")
    ran = _worker("--server", "https://127.0.0.1:1", "--token-file", str(token_file))
    assert ran.returncode == 2, ran.stderr
    assert f"--token-file {token_file}: expected the one-line token" in ran.stderr, ran.stderr
    assert "found 2 lines" in ran.stderr and "first-line" not in ran.stderr
    assert "--token:" not in ran.stderr
