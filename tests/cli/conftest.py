"""Fixtures for the command-line tests: ``spool_in`` runs ``spool ...`` in this process.

``spool_in(*args)`` (``spool_run(*args)`` without ``--spool``) calls the console entry point
(``spool.cli.main.main``, the function ``spool`` and ``python -m spool.cli`` run) with stdin,
stdout, stderr and the environment isolated, and returns the exit code and both outputs. It is used
where a fresh interpreter per call would cost seconds and prove nothing more; tests that need a real
process (exit status as the OS sees it, SIGKILL, concurrency) use ``spool_cli``/``run_spool`` from tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from spool.cli.main import main


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def run_in_process(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Ran:
    runner = CliRunner()
    with runner.isolation(input=input, env=env) as (out, err, _mixed):
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        out_text, err_text = out.getvalue().decode(), err.getvalue().decode()
    assert "Traceback" not in err_text, err_text
    return Ran(code, out_text, err_text)


@pytest.fixture
def spool_run() -> Callable[..., Ran]:
    """``spool ...`` in this process, with no --spool given."""
    return run_in_process


@pytest.fixture
def spool_in(spool_dir: Path) -> Callable[..., Ran]:
    """``spool --spool SPOOL_DIR ...`` in this process."""

    def call(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Ran:
        return run_in_process("--spool", str(spool_dir), *args, input=input, env=env)

    return call
