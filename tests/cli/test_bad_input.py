"""Promise 8, bad input: hostile job files give one clear line and crash nothing, touch nothing else.

Each bad file goes in twice: through ``spool submit -f FILE`` (exit 2, the message names the file
and the problem, nothing written) and as a drop into pending/ that a coordinator pass ingests
(dead/<id>.yaml with reason invalid, the error and the original text).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spool.disk.ids import new_id
from spool.disk.layout import State, job_name
from spool.runner.coordinator import Coordinator
from spool.spool import Spool
from spool.moves.store import read_job
from spool.moves.transitions import claim

Run = Callable[..., Any]

ALIAS_BOMB = "task: echo\nargs:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  {b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")
)

BAD_FILES: dict[str, tuple[bytes, str]] = {
    # name: (content, words the error must contain)
    "torn": (b"task: echo\nargs: {path: /data/bo", "expected ',' or '}'"),
    "garbage": (b"\x00\x01\xfe\xff garbage \x80\x81", "not valid UTF-8"),
    "binary-text": (b"\x01\x02\x03 task", "is not allowed"),
    "oversized": (b"task: echo\nargs: {s: '" + b"x" * 70_000 + b"'}\n", "over the limit of 65536"),
    "alias-bomb": (ALIAS_BOMB.encode(), "anchors are not allowed"),
    "deeply-nested": (b"task: echo\nargs: {a: " + b"[" * 200 + b"]" * 200 + b"}\n", "nesting is deeper than 32"),
    "python-object": (b"task: !!python/object/apply:os.system ['touch /tmp/spool-pwned']\n", "tags are not allowed"),
    "python-name": (b"!!python/name:os.system\n", "tags are not allowed"),
    "not-a-mapping": (b"- task: echo\n", "expected a mapping"),
    "unknown-field": (b"task: echo\ncolour: red\n", "unknown field 'colour'"),
    "wrong-type": (b"task: echo\nmax_tries: lots\n", "field 'max_tries'"),
    "duplicate-key": (b"task: echo\ntask: other\n", "duplicate key"),
    "id-given": (b"task: echo\nid: ../../etc\n", "ids are assigned by spool"),
    "two-documents": (b"task: echo\n---\ntask: other\n", "expected one document"),
    "missing-dependency": (f"task: echo\ndepends_on: [{new_id()}]\n".encode(), "depends_on: no job"),
}


def job_files(root: Path) -> list[str]:
    return sorted(n for state in State for n in os.listdir(root / state.value) if not n.startswith("."))


@pytest.fixture
def bystander(sp: Spool) -> Iterator[tuple[str, bytes]]:
    """A good job that must come through untouched."""
    job_id = sp.submit("echo", {"n": 1}, key="bystander")
    data = (sp.root / "pending" / job_name(job_id)).read_bytes()
    yield job_id, data
    assert (sp.root / "pending" / job_name(job_id)).read_bytes() == data
    claimed = claim(sp, "w", None)
    assert claimed is not None and claimed.id == job_id


# -- through `spool submit -f` ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_submit_f_refuses_a_bad_file_in_one_line_and_writes_nothing(
    spool_in: Run, sp: Spool, tmp_path: Path, bystander: tuple[str, bytes], kind: str
) -> None:
    content, words = BAD_FILES[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(content)
    before = job_files(sp.root)
    ran = spool_in("submit", "-f", str(path))
    expected = 3 if kind == "missing-dependency" else 2
    assert ran.code == expected, ran
    assert ran.out == "" and ran.err.count("\n") == 1 and ran.err.startswith("spool: "), ran.err
    assert words in ran.err
    if kind != "missing-dependency":
        assert str(path) in ran.err  # names the file
    assert job_files(sp.root) == before and os.listdir(sp.root / "tmp") == []
    assert len(os.listdir(sp.root / "keys")) == 1
    assert not Path("/tmp/spool-pwned").exists()


def test_submit_f_from_stdin_refuses_the_same_way(spool_in: Run, sp: Spool) -> None:
    ran = spool_in("submit", "-f", "-", input=BAD_FILES["alias-bomb"][0])
    assert ran.code == 2 and ran.err.startswith("spool: -: anchors are not allowed")
    assert job_files(sp.root) == []


def test_submit_f_of_a_missing_file_or_a_folder_is_a_usage_error(spool_in: Run, sp: Spool, tmp_path: Path) -> None:
    os.symlink(tmp_path / "nowhere.yaml", tmp_path / "dangling.yaml")
    for path in (tmp_path / "missing.yaml", tmp_path, tmp_path / "dangling.yaml"):
        ran = spool_in("submit", "-f", str(path))
        assert ran.code == 2 and ran.err.count("\n") == 1, ran
    assert job_files(sp.root) == []


def test_a_bad_file_in_a_real_process_is_one_line_without_a_traceback(spool_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_bytes(b"[" * 60_000)  # CSafeLoader would segfault on this
    proc = spool_cli("submit", "-f", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "nesting is deeper than 32" in proc.stderr and str(path) in proc.stderr


@pytest.mark.parametrize("job_id", ["../x", "..", "a/b", "../../etc/passwd", "-rf", "x" * 65, "X1.yaml"])
def test_a_path_traversing_id_is_refused(spool_in: Run, job_id: str) -> None:
    for command in ("status", "result", "cancel", "wait", "logs"):
        ran = spool_in(command, "--", job_id)
        assert ran.code == 2 and "is not a job id" in ran.err, (command, ran)


# -- as drops into pending/ ----------------------------------------------------------------------------


def ingest_all(sp: Spool) -> dict[str, Any]:
    """One coordinator pass; then the dead records by the name they were dropped as."""
    Coordinator(sp).run_pass()
    records = {}
    for name in os.listdir(sp.root / "dead"):
        record = read_job(sp, State.DEAD, name[:-5])
        records[record.dropped_as] = record
    return records


def test_every_bad_drop_lands_in_dead_as_invalid_with_its_error_and_text(
    sp: Spool, bystander: tuple[str, bytes]
) -> None:
    for kind, (content, _words) in BAD_FILES.items():
        (sp.root / "pending" / f"{kind}.yaml").write_bytes(content)
    records = ingest_all(sp)
    assert sorted(records) == sorted(f"{kind}.yaml" for kind in BAD_FILES)
    for kind, (content, words) in BAD_FILES.items():
        record = records[f"{kind}.yaml"]
        assert record.reason == "invalid" and record.error is not None, kind
        assert words in record.error and f"{kind}.yaml: " in record.error, (kind, record.error)
        assert "\n" not in record.error
        if kind == "oversized":
            assert record.original is not None and "over the limit" in record.original
        else:
            assert record.original == content.decode("utf-8", errors="replace"), kind
    pending = [n for n in os.listdir(sp.root / "pending") if not n.startswith(".")]
    assert pending == [job_name(bystander[0])]
    assert not Path("/tmp/spool-pwned").exists()
    assert ingest_all(sp) == records  # a second pass finds nothing new


def test_a_symlink_drop_is_dead_and_its_target_is_never_read_or_touched(
    sp: Spool, tmp_path: Path, bystander: tuple[str, bytes]
) -> None:
    target = tmp_path / "secret.yaml"
    target.write_text("task: echo\nargs: {secret: hunter2}\n")
    os.symlink(target, sp.root / "pending" / "link.yaml")
    record = ingest_all(sp)["link.yaml"]
    assert record.reason == "invalid" and "symbolic link" in (record.error or "")
    assert "hunter2" not in (record.original or "")
    assert target.read_text() == "task: echo\nargs: {secret: hunter2}\n"


def test_a_fifo_drop_is_dead_and_nothing_blocks(sp: Spool, bystander: tuple[str, bytes]) -> None:
    os.mkfifo(sp.root / "pending" / "pipe.yaml")
    record = ingest_all(sp)["pipe.yaml"]  # a blocking open would hang here
    assert record.reason == "invalid" and "not a regular file" in (record.error or "")


def test_a_drop_with_two_hard_links_is_dead_and_the_other_link_is_untouched(
    sp: Spool, tmp_path: Path, bystander: tuple[str, bytes]
) -> None:
    outside = tmp_path / "mine.yaml"
    outside.write_text("task: echo\n")
    os.link(outside, sp.root / "pending" / "linked.yaml")
    record = ingest_all(sp)["linked.yaml"]
    assert record.reason == "invalid" and "2 hard links" in (record.error or "")
    assert outside.read_text() == "task: echo\n"


def test_a_folder_in_pending_is_dead_and_nothing_crashes(sp: Spool, bystander: tuple[str, bytes]) -> None:
    (sp.root / "pending" / "folder.yaml").mkdir()
    record = ingest_all(sp)["folder.yaml"]
    assert record.reason == "invalid"


def test_a_huge_garbage_drop_makes_a_dead_record_that_reads_back(sp: Spool, bystander: tuple[str, bytes]) -> None:
    # Control bytes grow four-fold when YAML escapes them: the record must still be a readable file.
    (sp.root / "pending" / "noise.yaml").write_bytes(b"\x01" * 65_000)
    record = ingest_all(sp)["noise.yaml"]
    assert record.reason == "invalid"
    from spool.fsck import fsck

    report = fsck(sp)
    assert report.ok, report.violations


@pytest.mark.parametrize("name", ["..yaml", "...yaml", ".yaml", "x.yaml.tmp"])
def test_dot_and_tmp_names_are_never_read(sp: Spool, name: str) -> None:
    (sp.root / "pending" / name).write_text("task: [")
    assert ingest_all(sp) == {}
    assert (sp.root / "pending" / name).read_text() == "task: ["


@pytest.mark.parametrize(
    "name",
    [
        "a..b.yaml",
        "-rf.yaml",
        " .yaml",
        "yaml",
        "job",
        "x" * 250 + ".yaml",
        "new\nline.yaml",
        "ünï.yaml",
        "invoice-1.yaml",
        "anything.yaml",
    ],
)
def test_any_other_name_is_a_drop_ingested_under_a_new_id(sp: Spool, name: str) -> None:
    (sp.root / "pending" / name).write_text("task: echo\nargs: {n: 1}\n")
    Coordinator(sp).run_pass()
    pending = [n for n in os.listdir(sp.root / "pending") if not n.startswith(".")]
    assert len(pending) == 1 and pending[0] != name
    job_file = read_job(sp, State.PENDING, pending[0][:-5])
    assert job_file.dropped_as == name and job_file.job.args == {"n": 1}


def test_a_drop_whose_name_is_not_utf8_is_ingested_and_crashes_nothing(sp: Spool) -> None:
    name = os.fsdecode(b"caf\xe9.yaml")
    with open(os.path.join(os.fsencode(sp.root / "pending"), b"caf\xe9.yaml"), "w") as handle:
        handle.write("task: echo\n")
    Coordinator(sp).run_pass()
    pending = [n for n in os.listdir(sp.root / "pending") if not n.startswith(".")]
    assert len(pending) == 1 and pending[0] != name
    from spool.fsck import fsck

    assert fsck(sp).ok
