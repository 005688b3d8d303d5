"""``spool.disk.layout`` is the only module that builds or parses a name inside the spool.

Two halves: every name layout formats is parsed back to what made it (and other names are not
mistaken for it), and an AST scan of spool/, runner/ and cli/ fails when any other module holds
a string literal that is a fragment of a spool file name (a suffix, a prefix, a whole name), as
code that builds or parses names would. Text for people (messages, help, docstrings) has spaces
or is a docstring, and is not a name; the few exceptions that remain are listed with a reason.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from spool.disk import heartbeat, layout
from spool.disk.ids import is_generated_id, new_id

ROOT = Path(__file__).resolve().parents[2]
JOB = "01JD0000000000000000000000"


# -- formats and their parsers ------------------------------------------------------------------


def test_job_and_result_names_round_trip() -> None:
    job_id = new_id()
    assert layout.job_id_of(layout.job_name(job_id)) == job_id
    assert is_generated_id(layout.job_id_of(layout.job_name(job_id)))
    assert layout.result_id_of(layout.result_name(job_id)) == job_id
    for other in ("invoice.json", "x.yml", ".wake", "notes.txt", ""):
        assert layout.job_id_of(other) in ("", other[: -len(".yaml")])
    assert layout.job_id_of("invoice.json") == "" and layout.result_id_of(layout.job_name(job_id)) == ""


def test_heartbeat_name_and_content_round_trip() -> None:
    for attempt in (1, 7, 120):
        assert layout.parse_heartbeat_name(layout.heartbeat_name(JOB, attempt)) == (JOB, attempt)
    for other in (layout.cancel_name(JOB), layout.job_name(JOB), f".{JOB}.x.hb", f"{JOB}.1.hb", ".wake"):
        assert layout.parse_heartbeat_name(other) is None, other
    assert heartbeat.parse_heartbeat(heartbeat.heartbeat_content(41, "w-1")) == (41, "w-1")
    for torn in (None, b"", b"41", b"41 w-1 extra", b"x w-1", b"-1 w"):
        assert heartbeat.parse_heartbeat(torn) is None, torn


def test_dot_files_are_the_runners_and_never_jobs() -> None:
    set_aside = layout.set_aside_name(layout.cancel_name(JOB), "ab")
    for name in (
        layout.heartbeat_name(JOB, 1),
        layout.cancel_name(JOB),
        layout.drop_note_name(JOB),
        layout.invalid_folder_name(JOB),
        layout.WAKE_NAME,
        set_aside,
    ):
        assert layout.is_dot_name(name) and layout.is_ignored_name(name), name
    assert not layout.is_ignored_name(layout.job_name(JOB))
    assert layout.is_ignored_name("invoice.yaml.tmp")  # a user's write in progress


def test_lease_files_of_a_job() -> None:
    mine = [layout.heartbeat_name(JOB, 1), layout.heartbeat_name(JOB, 2), layout.cancel_name(JOB)]
    assert all(layout.is_lease_file_of(name, JOB) for name in mine)
    others = [
        layout.heartbeat_name(JOB + "X", 1),
        layout.cancel_name("OTHER"),
        layout.job_name(JOB),
        layout.set_aside_name(layout.heartbeat_name(JOB, 1), "0a1b2c3d"),
    ]
    assert not any(layout.is_lease_file_of(name, JOB) for name in others)


def test_drop_note_round_trips() -> None:
    assert layout.parse_drop_note_name(layout.drop_note_name(JOB)) == JOB
    assert layout.parse_drop_note_name(layout.cancel_name(JOB)) is None
    assert layout.parse_drop_note_name(layout.job_name(JOB)) is None


def test_tmp_names_carry_their_writer() -> None:
    assert layout.tmp_writer_pid(layout.tmp_name()) == os.getpid()
    assert layout.tmp_writer_pid(layout.purge_marker_name(JOB)) == os.getpid()
    assert layout.tmp_writer_pid("stray.tmp") is None
    assert layout.tmp_name() != layout.tmp_name()
    assert layout.parse_purge_marker(layout.purge_marker_name(JOB)) == JOB
    assert layout.parse_purge_marker(layout.tmp_name()) is None
    assert layout.parse_purge_marker(f"{os.getpid()}-purge-../x.tmp") is None  # never a path


def test_log_names_of_a_job() -> None:
    assert layout.is_log_of(layout.log_name(JOB, 3), JOB)
    assert not layout.is_log_of(layout.log_name(JOB + "X", 3), JOB)


def test_lock_names() -> None:
    assert layout.worker_of_lock_name(layout.worker_lock_name("w-1.a")) == "w-1.a"
    key_hash = layout.key_name("invoice-7")
    names = {
        layout.job_lock_name(JOB),
        layout.key_lock_name(key_hash),
        layout.worker_lock_name("w"),
        layout.coordinator_lock_name(),
        layout.ledger_lock_name(),
        layout.ledger_writes_lock_name(),
    }
    assert len(names) == 6 and all(name.endswith(".lock") for name in names)
    assert [layout.worker_of_lock_name(name) for name in sorted(names)].count(None) == 5
    assert len(key_hash) == 64 and key_hash == layout.key_name("invoice-7")


def test_ledger_names() -> None:
    assert layout.ledger_file_names() == ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm")
    first, second = layout.ledger_aside_name(0.0), layout.ledger_aside_name(0.0, 2)
    assert first == "ledger.sqlite3.corrupt-19700101T000000Z" and second == first + ".2"
    assert layout.ledger_file_names(first)[1] == first + "-wal"


# -- nobody else spells a name --------------------------------------------------------------------

# A literal without whitespace that contains one of these, starts with a prefix or is a whole
# name is a piece of a spool file name: only layout.py may hold it.
INFIXES = (
    ".yaml",
    ".json",
    ".lock",
    ".hb",
    ".log",
    ".tmp",
    ".cancel",
    ".drop",
    ".wake",
    ".planted-",
    "-purge-",
    ".invalid-folder",
    ".corrupt-",
    "ledger.sqlite3",
    "-wal",
    "-shm",
)
PREFIXES = ("worker-", "key-", "coordinator.")
WHOLE = (".spool", "config.yaml", "coordinator.lock")

# (module, literal): why it is not a name inside the spool.
EXCEPTIONS = {
    ("cli/processes.py", "worker-"): "the supervisor's label for its N-th worker process (`worker-1`), not a file",
    ("runner/api/openapi.py", "/openapi.json"): "the API's URL path for its OpenAPI document, not a file",
    ("spool/disk/marker.py", ".spool"): "the marker's name beside the format it holds; layout re-exports both",
}

SCANNED = ("spool", "runner", "cli")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _is_name_fragment(text: str) -> bool:
    if not text or any(ch.isspace() for ch in text):
        return False
    return text in WHOLE or text.startswith(PREFIXES) or any(part in text for part in INFIXES)


def _name_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # an f-string is judged whole: its text without the values
            parts = [part for part in node.values if isinstance(part, ast.Constant)]
            skip.update(id(part) for part in parts)
            text = "".join(str(part.value) for part in parts)
            if _is_name_fragment(text):
                found.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if _is_name_fragment(node.value):
                found.append((node.lineno, node.value))
    return found


def _modules() -> list[Path]:
    return sorted(path for folder in SCANNED for path in (ROOT / folder).rglob("*.py"))


def test_the_scan_sees_every_module_and_catches_a_hand_built_name(tmp_path: Path) -> None:
    assert len(_modules()) > 30
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docstrings may say <id>.yaml."""\n'
        "def f(job_id, name):\n"
        '    """Or .<id>.cancel."""\n'
        '    log("moved %s to done/ (<id>.yaml)", job_id)\n'
        '    print(f"look in {name}/done/*.yaml")\n'
        '    return f".{job_id}.cancel", name.endswith(".hb"), "worker-" + name, f"{job_id}.{1}.log"\n'
    )
    assert sorted(text for _line, text in _name_literals(sample)) == ["..cancel", "..log", ".hb", "worker-"]


@pytest.mark.parametrize("module", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_only_layout_builds_or_parses_a_spool_name(module: Path) -> None:
    where = str(module.relative_to(ROOT))
    if where == "spool/disk/layout.py":
        return
    found = [(line, text) for line, text in _name_literals(module) if (where, text) not in EXCEPTIONS]
    assert not found, f"{where} spells spool file names itself (use spool.disk.layout): {found}"


def test_every_exception_is_still_needed() -> None:
    for where, text in EXCEPTIONS:
        assert text in [found for _line, found in _name_literals(ROOT / where)], (where, text)
