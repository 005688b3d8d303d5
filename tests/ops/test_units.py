"""examples/systemd/'s units are well-formed and run commands the CLI has.

Each unit parses as systemd reads it (sections, ``Key=Value``); every ``spool`` command a unit
runs exists, with every flag it passes (its ``--help`` lists them); ``systemd-analyze verify``
accepts the units (with ExecStart pointed at this venv's ``spool``, the one path that differs)
and ``systemd-analyze security --offline`` keeps them out of "EXPOSED", where systemd is present.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, run_spool

UNITS_DIR = ROOT / "examples" / "systemd"
UNITS = sorted(p for p in UNITS_DIR.iterdir() if p.suffix in (".service", ".timer"))
INSTALLED = "/opt/spool/venv/bin/spool"
SECTIONS = {".service": {"Unit", "Service", "Install"}, ".timer": {"Unit", "Timer", "Install"}}
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as systemd reads it: [Section] headers, Key=Value lines (a key may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if re.fullmatch(r"\[[A-Za-z]+\]", stripped):
            current = stripped[1:-1]
            sections.setdefault(current, [])
            continue
        match = re.fullmatch(r"([A-Z][A-Za-z]*)=(.*)", stripped)
        assert match and current, f"{path.name}:{number}: not a section or Key=Value: {line!r}"
        sections[current].append((match[1], match[2]))
    return sections


def exec_starts() -> list[tuple[str, list[str]]]:
    found = []
    for unit in UNITS:
        for key, value in parse_unit(unit).get("Service", []):
            if key == "ExecStart":
                found.append((unit.name, shlex.split(value)))
    return found


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_a_unit_parses_with_its_sections(unit: Path) -> None:
    sections = parse_unit(unit)
    assert set(sections) <= SECTIONS[unit.suffix] and "Unit" in sections
    if unit.suffix == ".service":
        keys = dict(sections["Service"])
        assert keys["ExecStart"].startswith(INSTALLED + " ")
        assert keys["User"] == "spool" and keys["ProtectSystem"] == "strict"
    else:
        assert (UNITS_DIR / unit.with_suffix(".service").name).exists(), "a timer starts its .service"


@pytest.mark.parametrize(("unit", "argv"), exec_starts(), ids=[name for name, _ in exec_starts()])
def test_every_command_a_unit_runs_exists_with_its_flags(unit: str, argv: list[str]) -> None:
    assert argv[0] == INSTALLED
    command = []  # the words before the first flag: `serve`, `token add`
    for word in argv[1:]:
        if word.startswith("-"):
            break
        command.append(word)
    helped = run_spool(*command, "--help")
    assert helped.returncode == 0, f"{unit}: spool {' '.join(command)}: {helped.stderr}"
    for flag in (word.split("=")[0] for word in argv[1:] if word.startswith("--")):
        listed = re.search(rf"(^|\s){re.escape(flag)}(?=[\s,=]|$)", helped.stdout, re.M)
        assert listed, f"{unit}: {flag} is not a flag of spool {' '.join(command)}"


def installed_here(tmp_path: Path) -> Path:
    """The units as this machine would install them: ExecStart at this venv's spool."""
    here = Path(sys.executable).parent / "spool"
    assert here.exists()
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(here)))
    return tmp_path


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    folder = installed_here(tmp_path)
    names = [str(folder / unit.name) for unit in UNITS]
    verified = subprocess.run([str(SYSTEMD_ANALYZE), "verify", *names], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    assert not [line for line in verified.stderr.splitlines() if "spool" in line], verified.stderr


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("unit", [u for u in UNITS if u.suffix == ".service"], ids=lambda p: p.name)
def test_the_units_stay_hardened(unit: Path) -> None:
    scored = subprocess.run(
        [str(SYSTEMD_ANALYZE), "security", "--offline=true", str(unit)], capture_output=True, text=True, timeout=60
    )
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", scored.stdout)
    if scored.returncode != 0 and match is None:
        pytest.skip(f"systemd-analyze security --offline is not available here: {scored.stderr.strip()[:200]}")
    assert match, scored.stdout[-500:]
    assert float(match[1]) <= 2.0, f"{unit.name}: exposure {match[1]} (docs/operations.md gives 1.2-1.7)"


def test_the_backup_script_parses() -> None:
    assert subprocess.run(["sh", "-n", str(UNITS_DIR / "spool-backup.sh")]).returncode == 0
