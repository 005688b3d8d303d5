"""`spool submit` starts fast: a fresh process imports only what submitting uses (spool.cli.main's
LazyCommands, and Spool's admin/stats imported on first use). A change that pulls another
command's module, recovery or the runner back into every command shows here, not only as
milliseconds in the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# What a submit must never load: other commands, the runner, the crash-recovery and admin paths.
NOT_FOR_SUBMIT = {
    "spool.cli.inspecting",
    "spool.cli.logview",
    "spool.cli.managing",
    "spool.cli.processes",
    "spool.fsck",
    "spool.admin",
    "spool.moves.recovery",
    "spool.views.stats",
    "spool.runner.supervisor",
    "subprocess",
    "socket",
    # spool serve's libraries and modules: only that command (and a remote worker) loads them
    "spool.runner.api",
    "spool.tokens",
    "spool.moves.remote_leases",
    "starlette",
    "uvicorn",
    "cryptography",
    "jinja2",
    "prometheus_client",
    "ssl",
}

# What a submit without a key or JSON needs none of: logging (spool.base.lazylog), hashes (a key's file
# name), chance (a backoff's jitter), json (--json, -a NAME:=JSON), the batch path, schedules and zoneinfo.
NOT_FOR_A_PLAIN_SUBMIT = {
    "logging",
    "hashlib",
    "secrets",
    "random",
    "json",
    "spool.moves.batch",
    "spool.schedule.format",
    "zoneinfo",
}

# json is imported only once the command's modules are counted: a plain submit never loads it.
PROBE = """
import sys
from spool.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
modules = sorted(sys.modules)
import json
sys.stderr.write(json.dumps({"code": code, "modules": modules}))
"""


def modules_after(*args: str) -> tuple[int, set[str]]:
    ran = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    report = json.loads(ran.stderr.splitlines()[-1])
    return report["code"], set(report["modules"])


def test_spool_submit_imports_only_what_submitting_uses(spool_dir: Path) -> None:
    code, modules = modules_after("--spool", str(spool_dir), "submit", "echo", "-a", "n=1")
    assert code in (0, None)
    assert "spool.cli.submitting" in modules
    assert modules & NOT_FOR_SUBMIT == set()
    assert modules & NOT_FOR_A_PLAIN_SUBMIT == set()


def test_the_group_help_still_loads_every_command(spool_dir: Path) -> None:
    code, modules = modules_after("--help")
    assert code in (0, None)
    assert {"spool.cli.inspecting", "spool.cli.managing", "spool.cli.processes"} <= modules
