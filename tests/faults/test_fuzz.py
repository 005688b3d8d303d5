"""Fuzzed input: hostile job files and dropped files never crash a process nor touch another job.

Promise 8 (docs/reliability.md, "8. Bad input"): malformed YAML, unknown fields, wrong types, a
file over the size limit, an alias bomb, deep nesting, a symlink or a path-traversing id give a
clear error (a CLI message, or the drop moved to dead/ with reason ``invalid``); no process
crashes; no other job is touched.

- hypothesis writes drops (random bytes, deep nesting, huge strings, UTF-16/UTF-32/latin-1/BOMs,
  YAML 1.1 traps, duplicate keys, anchors and aliases, tags, ``id:`` fields with ``../`` or NUL,
  ``depends_on`` with traversal) and ingests each with ``Coordinator.run_pass`` in-process: the
  drop becomes exactly one job, valid (pending/ or waiting/, as the parser reads it) or dead/ with
  reason invalid, and the sentinel jobs' files are byte for byte the same;
- a real ``spool coordinator`` ingests what can't be written as bytes: symlinks (to /etc/passwd,
  to another job, dangling, to a folder), a FIFO, a socket, a folder, hard links (to another job,
  to a file outside), and survives them all;
- ``spool submit -f`` gets a sample of the same files: exit 0 with an id, or exit 2/3 with one
  line on stderr and no traceback;
- queue files (queues/<name>.yaml, which the coordinator syncs into the ledger every pass):
  hypothesis writes their bytes (valid limits, trapped values, unknown and repeated fields,
  random bytes, UTF-16, the size limit, aliases, tags); a valid file is in force after one pass,
  a broken one is listed with its error and keeps the last valid limits in force; a real
  coordinator meets symlinks, a FIFO, a socket, a folder and an oversized file there.

The bench has a limited queue (``mail``, the queue a fuzzed drop's plausible ``queue:`` names) with
a job in it: no drop and no other queue's file may change its file, its limits or its job.

There is no HTTP API yet, so there are no API bodies to fuzz here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from spool.runner.coordinator import Coordinator
from support import Procs, run_spool, wait_until

from spool import Spool
from spool.base.errors import InvalidJob, NotFound
from spool.fsck import fsck
from spool.disk.ids import is_valid_id, new_id
from spool.job import Job, JobFile
from spool.disk.layout import State, key_name
from spool.moves.recovery import list_folders
from spool.moves.store import read_job
from spool.moves.transitions import claim, complete
from spool.queues import Limits, limits_in_force, limits_of_fields, read_files, set_limits
from spool.views import queue_views
from spool.yaml.safe import load_yaml

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
LIMITED = "mail"  # the queue a fuzzed drop's GOOD queue field names: limited on the bench
MISSING_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"  # a well-formed id of no job

# -- the bench: a spool with sentinel jobs in three states -----------------------------------------


@dataclass
class Bench:
    root: Path
    sp: Spool
    sentinels: dict[str, State]

    def snapshot(self) -> dict[str, bytes]:
        """Every byte of every sentinel: its job file where it is, its result, its key reservation."""
        files: dict[str, bytes] = {}
        for job_id, state in self.sentinels.items():
            files[f"{state.value}/{job_id}.yaml"] = (self.root / state.value / f"{job_id}.yaml").read_bytes()
            result = self.root / "results" / f"{job_id}.json"
            if result.exists():
                files[f"results/{job_id}.json"] = result.read_bytes()
        for key in ("sentinel-pending", "sentinel-done", "sentinel-waiting", "sentinel-mail"):
            files[f"keys/{key}"] = (self.root / "keys" / key_name(key)).read_bytes()
        files[f"queues/{LIMITED}.yaml"] = (self.root / "queues" / f"{LIMITED}.yaml").read_bytes()
        return files


def make_bench(parent: str | None) -> Bench:
    root = Path(tempfile.mkdtemp(prefix="spool-fuzz-", dir=parent)) / "spool"
    sp = Spool.init(root, environ={})
    done = sp.submit("echo", {"who": "done"}, key="sentinel-done")
    leased = claim(sp, "w", None)
    assert leased is not None and leased.id == done
    from spool.moves.transitions import Lease

    complete(sp, Lease(done, "w", leased.attempt), b'{"ok": true}')
    pending = sp.submit("echo", {"who": "pending"}, key="sentinel-pending")
    # waiting on a job that stays pending (no worker runs here)
    waiting = sp.submit("echo", {"who": "waiting"}, key="sentinel-waiting", depends_on=[pending])
    # A limited queue (the one GOOD's drops name) holding a job: no drop may change either.
    set_limits(sp, LIMITED, concurrency=1, rate="100/s")
    mail = sp.submit("echo", {"who": "mail"}, key="sentinel-mail", queue=LIMITED)
    return Bench(root, sp, {done: State.DONE, pending: State.PENDING, waiting: State.WAITING, mail: State.PENDING})


BENCH_LIMITS = Limits(concurrency=1, rate_count=100, rate_ms=1000)


def _shm() -> str | None:
    # tmpfs when there is one: ingest's logic is under test here, not fsync's durability.
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    made = make_bench(_shm())
    yield made
    made.sp.close()
    shutil.rmtree(made.root.parent, ignore_errors=True)


def ingest_and_check(bench: Bench, name: str, data: bytes) -> tuple[State, JobFile]:
    """Drop ``data`` as pending/<name>, run one coordinator pass, and hold the promises.

    Returns (state, job file). The new job is then removed again, so the bench stays small.
    """
    sp, pending = bench.sp, bench.root / "pending"
    before_jobs = set(list_folders(sp).jobs)
    before = bench.snapshot()
    (pending / name).write_bytes(data)

    Coordinator(sp).run_pass()  # raises nothing, whatever the drop holds

    assert name not in os.listdir(pending), f"pending/{name} was not ingested"
    listing = list_folders(sp)
    new = {job_id: folders for job_id, folders in listing.jobs.items() if job_id not in before_jobs}
    assert len(new) == 1, f"one drop made {len(new)} jobs: {new}"
    ((job_id, folders),) = new.items()
    assert len(folders) == 1
    state = folders[0]
    job_file = read_job(sp, state, job_id)
    assert job_file.dropped_as == name
    if state is State.DEAD:
        assert job_file.reason == "invalid" and job_file.error and isinstance(job_file.original, str)
        assert job_file.error.count("\n") == 0 or len(job_file.error) <= 4096
    else:
        # Valid: the job is what the parser makes of the same bytes.
        loaded = load_yaml(data, max_bytes=sp.settings.max_job_bytes, source=name)
        spec = Job.from_spec(
            cast(Any, loaded),
            job_id=job_id,
            default_max_tries=sp.settings.max_tries,
            default_timeout=sp.settings.default_timeout_seconds,
            where=name,
        )
        assert job_file.job == spec
        assert state is (
            State.WAITING
            if set(spec.depends_on) - {b for b, s in bench.sentinels.items() if s is State.DONE}
            else State.PENDING
        )
    assert bench.snapshot() == before, "a drop touched another job"
    assert limits_in_force(sp, LIMITED) == BENCH_LIMITS, "a drop changed a queue's limits"
    report = fsck(sp)
    assert not report.violations, report.violations

    # Tidy: forget the new job (and its key), so every example starts from the same bench.
    (bench.root / state.value / f"{job_id}.yaml").unlink()
    if state is not State.DEAD and job_file.job.has_own_key:
        (bench.root / "keys" / key_name(job_file.job.key)).unlink(missing_ok=True)
    sp.ledger.forget([job_id])
    return state, job_file


# -- what hypothesis writes ------------------------------------------------------------------------

TRAPS = [
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "True",
    "0123",
    "0o17",
    "0x1F",
    "1_000",
    "1e3",
    "12:30:00",
    ".inf",
    "-.inf",
    ".nan",
    "~",
    "null",
    "",
    "2026-01-01",
    "2026-11-30T12:00:00Z",
    "'quoted'",
    '"a\\0b"',
    '"\\x00"',
    "!!python/object/apply:os.system ['true']",
    "!!str x",
    "!!binary aGk=",
    "!custom v",
    "&a [1]",
    "*a",
    "[1, 2]",
    "{a: 1}",
    "{a: 1, a: 2}",
    "echo",
    "shell",
    "../../etc/passwd",
    "/etc/passwd",
    "-1",
    "1.5",
    "3",
    "0",
    "1001",
    "|\n  block",
    ">\n  folded",
    "? complex",
    "[[[[[[[[[[",
    "'unterminated",
    "\t",
    "%YAML 1.1",
    MISSING_ID,
]
FIELDS = [
    "task",
    "key",
    "args",
    "priority",
    "max_tries",
    "timeout",
    "not_before",
    "depends_on",
    "queue",
    "spool_format",
    "id",
    "attempt",
    "lease",
    "reason",
    "original",
    "unknown_field",
    "Task",
    "task ",
    "<<",
]
GOOD = {
    "task": "echo",
    "args": "{n: 1}",
    "priority": "0",
    "max_tries": "2",
    "timeout": "30",
    "not_before": "2020-01-01T00:00:00Z",
    "depends_on": "[]",
    "spool_format": "1",
    "key": "fuzz-key",
    "queue": "mail",
}

scalar_text = st.one_of(
    st.sampled_from(TRAPS),
    st.text(max_size=20).map(lambda t: t.replace("\n", " ")),
    st.integers(-(10**20), 10**20).map(str),
)


@st.composite
def job_text(draw: st.DrawFn) -> str:
    """A YAML mapping of job fields: mostly plausible, some trapped, some twice, some unknown."""
    lines = []
    if draw(st.booleans()):
        lines.append("task: echo")
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(FIELDS))
        value = GOOD.get(name, "x") if draw(st.integers(0, 3)) == 0 else draw(scalar_text)
        if name == "depends_on" and draw(st.booleans()):
            value = (
                "["
                + ", ".join(
                    draw(
                        st.lists(
                            st.sampled_from(
                                [
                                    "../x",
                                    "../../etc/passwd",
                                    "a/b",
                                    ".hidden",
                                    "a\\0b",
                                    "'a\\x00b'",
                                    MISSING_ID,
                                    "''",
                                    "-x",
                                    "A" * 65,
                                ]
                            ),
                            min_size=1,
                            max_size=3,
                        )
                    )
                )
                + "]"
            )
        if name == "id":
            value = draw(st.sampled_from(['"../../etc/passwd"', '"a\\0b"', '"a\\x00b"', new_id(), "../x", "'x/../y'"]))
        lines.append(f"{name}: {value}")
    return "\n".join(lines) + ("\n" if draw(st.booleans()) else "")


def nested(depth: int, kind: str) -> bytes:
    if kind == "flow-list":
        return b"task: echo\nargs: {a: " + b"[" * depth + b"]" * depth + b"}\n"
    if kind == "flow-map":
        return b"task: echo\nargs: " + b"{a: " * depth + b"1" + b"}" * depth + b"\n"
    if kind == "block":
        return b"task: echo\nargs:\n" + b"".join(b"  " * (i + 1) + b"a:\n" for i in range(depth))
    return b"[" * depth  # unclosed


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252"]

drop_bytes = st.one_of(
    st.binary(max_size=400),
    job_text().map(str.encode),
    st.tuples(job_text(), st.sampled_from(ENCODINGS), st.sampled_from(["", "café ü", "日本"])).map(
        lambda t: (t[0] + f"\n# {t[2]}\n" if t[2] else t[0]).encode(t[1], errors="replace")
    ),
    st.tuples(st.integers(1, 3000), st.sampled_from(["flow-list", "flow-map", "block", "open"])).map(
        lambda t: nested(*t)
    ),
    st.integers(65536 - 40, 65536 + 40).map(lambda n: b"task: echo\nargs: {s: '" + b"x" * (n - 26) + b"'}\n"),
    st.sampled_from(
        [
            b"task: echo\ntask: sleep\n",  # duplicate keys
            b"task: echo\nargs: {a: 1, a: 2}\n",
            b"task: echo\nargs: &a {x: 1}\nkey: *a\n",  # anchors and aliases
            b"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",  # an alias bomb's seed
            b"!!python/object/apply:os.system ['true']\n",
            b"task: !!python/name:os.system echo\n",
            b"task: echo\nargs: !!map {a: 1}\n",
            b"task: echo\nargs: {a: !custom 1}\n",
            b"task: echo\n---\ntask: echo\n",  # two documents
            b"%YAML 1.1\n---\ntask: echo\n",
            b"task: echo\nid: ../../etc/passwd\n",
            b'task: echo\nid: "01ARZ3NDEKTSV4RRFFQ69G5F\\0V"\n',
            b"task: echo\nkey: a\x00b\n",
            b"task: echo\ndepends_on: [../../tmp/x]\n",
            b"task: echo\ndepends_on: ../x\n",
            b"task: echo\nargs: {when: 2026-01-01, octal: 0123, flag: on}\n",
            b"\xef\xbb\xbftask: echo\n",
            b"\xff\xfet\x00a\x00s\x00k\x00:\x00 \x00e\x00c\x00h\x00o\x00\n\x00",
        ]
    ),
)

drop_names = (
    st.text(alphabet=st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]), min_size=1, max_size=40)
    .map(lambda t: t + ".yaml")
    .filter(
        lambda n: (
            not n.startswith(".")
            and not n.endswith(".tmp")
            and len(n.encode()) < 250
            and not (len(n) == 31 and all(c in _ALPHABET for c in n[:26]))
        )
    )
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(name=drop_names, data=drop_bytes)
@example(name="a.yaml", data=b"task: echo\nargs: {when: 2026-01-01, octal: 0123, flag: on}\n")
def test_a_fuzzed_drop_becomes_one_job_and_touches_no_other(bench: Bench, name: str, data: bytes) -> None:
    ingest_and_check(bench, name, data)


# -- queue files: what a person (or anyone who can write queues/) leaves there ------------------------

FUZZED_QUEUE = "fuzzq"
FUZZED_BEFORE = Limits(concurrency=3)  # the last valid limits, set before each example
QUEUE_FIELDS = ["concurrency", "rate", "paused", "Concurrency", "rates", "queue", "<<", "concurrency "]
QUEUE_VALUES = {
    "concurrency": ["2", "1", "0", "-1", "1000000000", "1000000001", "1.5", "true", "'2'", "0x10", "~", "[2]"],
    "rate": ["5/s", "10/m", "3/h", "0/s", "5/d", "5 /s", "5/S", "'5/s'", "5", "1/ms", "99999999999/s", "-1/s", "~"],
    "paused": ["true", "false", "yes", "on", "1", "'true'", "~", "True"],
}


@st.composite
def queue_text(draw: st.DrawFn) -> str:
    """A queue file's fields: mostly plausible values, traps, some fields twice, some unknown."""
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(QUEUE_FIELDS[:3] if draw(st.integers(0, 3)) else QUEUE_FIELDS))
        values = QUEUE_VALUES.get(name, [])
        value = draw(st.sampled_from(values)) if values and draw(st.integers(0, 4)) else draw(scalar_text)
        lines.append(f"{name}: {value}")
    return "\n".join(lines) + ("\n" if draw(st.booleans()) else "")


valid_queue_text = st.fixed_dictionaries(
    {},
    optional={
        "concurrency": st.integers(1, 10**9).map(str),
        "rate": st.tuples(st.integers(1, 10**9), st.sampled_from("smh")).map(lambda t: f"{t[0]}/{t[1]}"),
        "paused": st.sampled_from(["true", "false"]),
    },
).map(lambda fields: "".join(f"{name}: {value}\n" for name, value in fields.items()))

queue_bytes = st.one_of(
    valid_queue_text.map(str.encode),
    queue_text().map(str.encode),
    queue_text().map(lambda t: t.encode("utf-16")),
    st.binary(max_size=200),
    st.integers(4096 - 20, 4096 + 20).map(lambda n: b"concurrency: 2\n#" + b"x" * (n - 18) + b"\n"),
    st.sampled_from(
        [
            b"",
            b"concurrency: 2\nconcurrency: 3\n",
            b"concurrency: &a 2\nrate: *a\n",
            b"- concurrency: 2\n",
            b"!!python/object/apply:os.system ['true']\n",
            b"concurrency: !!int 2\n",
            b"rate: 5/s\n---\nrate: 1/s\n",
            b"{concurrency: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}\n",
        ]
    ),
)


def _expected_queue(data: bytes) -> Limits | None:
    """What the parser makes of a queue file's bytes: its limits, or None when it is broken."""
    try:
        return limits_of_fields(load_yaml(data, max_bytes=4096, source="q"), "q")
    except InvalidJob:
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=queue_bytes)
@example(data=b"rate: 5/d\n")
@example(data=b"concurrency: 2\nrate: 5/s\npaused: true\n")
def test_a_fuzzed_queue_file_is_synced_or_listed_broken_keeping_its_last_limits(bench: Bench, data: bytes) -> None:
    """The coordinator's sync of queues/ (every pass) meets any bytes in a queue file: a valid file
    is in force at once; a broken one keeps the last valid limits in force and shows its error in
    ``spool queue list``'s view; no process crashes, no job is touched, the other queues keep theirs."""
    sp = bench.sp
    set_limits(sp, FUZZED_QUEUE, concurrency=FUZZED_BEFORE.concurrency, paused=False, clear=True)
    assert limits_in_force(sp, FUZZED_QUEUE) == FUZZED_BEFORE
    before = bench.snapshot()
    folder = bench.root / "queues"
    staged = folder / f".{FUZZED_QUEUE}.staged"  # a dot-name: no queue's
    staged.write_bytes(data)
    staged.rename(folder / f"{FUZZED_QUEUE}.yaml")  # a new inode: the sync sees a changed file

    Coordinator(sp).run_pass()  # raises nothing, whatever the file holds

    expected = _expected_queue(data)
    event("broken" if expected is None else "limits nothing" if not expected.limits_anything else "limits")
    found = read_files(sp)[FUZZED_QUEUE]
    view = next(v for v in queue_views(sp) if v["name"] == FUZZED_QUEUE)
    if expected is None:
        assert found.limits is None and found.error, found
        assert "\n" not in found.error and len(found.error) < 2000, found.error
        assert limits_in_force(sp, FUZZED_QUEUE) == FUZZED_BEFORE, "a broken file changed the limits in force"
        assert view["error"] == found.error and view["concurrency"] == FUZZED_BEFORE.concurrency, view
    else:
        assert found.limits == expected and found.error is None, found
        assert limits_in_force(sp, FUZZED_QUEUE) == expected
        assert view["error"] is None, view
    assert limits_in_force(sp, LIMITED) == BENCH_LIMITS, "one queue's file changed another's limits"
    assert bench.snapshot() == before, "a queue file touched a job"
    assert not fsck(sp).violations


# -- what must be refused, whatever else the fuzzer finds ---------------------------------------------

REFUSED = {
    "random bytes": b"\x80\x81\xfe\xff garbage \x00\x01",
    "utf-16": "task: echo\n".encode("utf-16"),
    "utf-32": "task: echo\n".encode("utf-32"),
    "latin-1": "task: echo\nargs: {who: café}\n".encode("latin-1"),
    "deep nesting": nested(40, "flow-list"),
    "very deep nesting": nested(100_000, "flow-list")[:65000],
    "over the size limit": b"task: echo\nargs: {s: '" + b"x" * 70000 + b"'}\n",
    "duplicate keys": b"task: echo\ntask: sleep\n",
    "anchor and alias": b"task: echo\nargs: &a {x: 1}\nkey: *a\n",
    "alias bomb": b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
    "python tag": b"!!python/object/apply:os.system ['touch /tmp/spool-fuzz-pwned']\n",
    "custom tag": b"task: echo\nargs: {a: !custom 1}\n",
    "an id field": b"task: echo\nid: ../../etc/passwd\n",
    "NUL in id": b'task: echo\nid: "01ARZ3NDEKTSV4RRFFQ69G5F\\0V"\n',
    "NUL in key": b'task: echo\nkey: "a\\0b"\n',
    "raw NUL": b"task: echo\nkey: a\x00b\n",
    "depends_on traversal": b"task: echo\ndepends_on: [../../etc/passwd]\n",
    "depends_on missing": f"task: echo\ndepends_on: [{MISSING_ID}]\n".encode(),
    "yaml 1.1 octal key": b"task: echo\nkey: 0123\n",
    "yaml 1.1 bool priority": b"task: echo\npriority: yes\n",
    "yaml 1.1 date key": b"task: echo\nkey: 2026-01-01\nnot_before: 2026-01-01\n",
    "two documents": b"task: echo\n---\ntask: echo\n",
    "unknown field": b"task: echo\nqueues: high\n",
    "a list": b"- task: echo\n",
    "empty": b"",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_hostile_content_lands_in_dead_as_invalid(bench: Bench, what: str) -> None:
    state, job_file = ingest_and_check(bench, f"{what}.yaml", REFUSED[what])
    assert state is State.DEAD, f"{what}: accepted as {job_file}"
    assert not os.path.exists("/tmp/spool-fuzz-pwned")


def test_yaml_1_1_traps_read_as_yaml_1_2(bench: Bench) -> None:
    data = b"task: echo\nkey: '0123'\nargs: {when: 2026-01-01, octal: 0123, flag: on, no: off, hex: 0x1F}\n"
    state, job_file = ingest_and_check(bench, "traps.yaml", data)
    assert state is State.PENDING
    assert dict(job_file.job.args) == {"when": "2026-01-01", "octal": 123, "flag": "on", "no": "off", "hex": 31}
    assert job_file.job.key == "0123"


# -- what can't be written as bytes: a real coordinator ingests it -----------------------------------


def test_special_files_dropped_beside_a_running_coordinator(spool_dir: Path, tmp_path: Path, procs: Procs) -> None:
    sp = Spool(spool_dir, environ={})
    victim = sp.submit("echo", {"who": "victim"}, key="victim")
    pending = spool_dir / "pending"
    outside = tmp_path / "outside.yaml"
    outside.write_bytes(b"task: echo\n")
    before = {p.name: p.read_bytes() for p in [pending / f"{victim}.yaml", spool_dir / "keys" / key_name("victim")]}
    passwd = Path("/etc/passwd").read_bytes()

    os.symlink("/etc/passwd", pending / "to-passwd.yaml")
    os.symlink(f"{victim}.yaml", pending / "to-another-job.yaml")
    os.symlink(f"../pending/{victim}.yaml", pending / "to-another-job-via-parent.yaml")
    os.symlink("/nonexistent/nothing", pending / "dangling.yaml")
    os.symlink("/tmp", pending / "to-a-folder.yaml")
    os.mkfifo(pending / "a-fifo.yaml")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(pending / "a-socket.yaml"))
    (pending / "a-folder.yaml").mkdir()
    (pending / "a-folder.yaml" / "inside.yaml").write_bytes(b"task: echo\n")
    os.link(pending / f"{victim}.yaml", pending / "hard-link-to-another-job.yaml")
    os.link(outside, pending / "hard-link-outside.yaml")
    (pending / "new\nline.yaml").write_bytes(b"task: echo\n")
    (pending / "ünïcødé.yaml").write_bytes(b"task: echo\n")
    (pending / "no-suffix").write_bytes(b"task: echo\n")
    (pending / "not-yaml.json").write_bytes(b'{"task": "echo"}')
    (pending / "unreadable.yaml").write_bytes(b"task: echo\n")
    os.chmod(pending / "unreadable.yaml", 0)
    invalid = {
        "to-passwd.yaml",
        "to-another-job.yaml",
        "to-another-job-via-parent.yaml",
        "dangling.yaml",
        "to-a-folder.yaml",
        "a-fifo.yaml",
        "a-socket.yaml",
        "a-folder.yaml",
        "hard-link-to-another-job.yaml",
        "hard-link-outside.yaml",
    }
    valid = {"new\nline.yaml", "ünïcødé.yaml", "no-suffix", "not-yaml.json", "unreadable.yaml"}  # root reads 0000

    try:
        coordinator = procs.start("coordinator", name="coordinator")
        names = invalid | valid

        def ingested() -> bool:
            return not names & set(os.listdir(pending))

        wait_until(ingested, timeout=60, message="every special drop to be ingested")

        def settled() -> dict[str, tuple[list[State], JobFile]] | None:
            """Each drop's outcome, once every refused one has its final dead record (written after the move)."""
            found: dict[str, tuple[list[State], JobFile]] = {}
            for job_id, folders in list_folders(sp).jobs.items():
                try:
                    job_file = read_job(sp, folders[0], job_id)
                except (FileNotFoundError, InvalidJob):  # moving, or moved to dead/ and not yet rewritten
                    return None
                if job_file.dropped_as is not None:
                    found[job_file.dropped_as] = (folders, job_file)
            final = set(found) == names and all(found[n][1].reason == "invalid" for n in invalid)
            return found if final else None

        outcomes = wait_until(settled, timeout=60, message="every refused drop's dead record")
        assert coordinator.poll() is None, "the coordinator died"
    finally:
        server.close()
    assert isinstance(outcomes, dict) and set(outcomes) == names
    for name in invalid:
        folders, job_file = outcomes[name]
        assert folders == [State.DEAD] and job_file.reason == "invalid", f"{name}: {folders} {job_file.reason}"
        assert "root:" not in (job_file.original or ""), f"{name}: /etc/passwd was read through a link"
    for name in valid:
        assert outcomes[name][0] == [State.PENDING], name
    assert {
        p.name: p.read_bytes() for p in [pending / f"{victim}.yaml", spool_dir / "keys" / key_name("victim")]
    } == before
    assert Path("/etc/passwd").read_bytes() == passwd
    assert outside.read_bytes() == b"task: echo\n" and os.stat(outside).st_nlink == 1
    assert "Traceback" not in procs.output()
    check = run_spool("fsck", spool=spool_dir)
    assert check.returncode == 0, check.stdout + check.stderr
    sp.close()


def test_special_queue_files_beside_a_running_coordinator(spool_dir: Path, tmp_path: Path, procs: Procs) -> None:
    """What can't be written as bytes, in queues/: the coordinator's sync (every pass) lists each
    with its error and survives; a valid file replaced by a symlink keeps its last valid limits
    (the link's target is never read); names that are no queue's are left alone."""
    sp = Spool(spool_dir, environ={})
    set_limits(sp, "gpu", concurrency=1)
    gpu_seen = sp.ledger.queue_limit_rows()["gpu"][2]
    queues_dir = spool_dir / "queues"
    outside = tmp_path / "outside.yaml"
    outside.write_text("concurrency: 50\n")
    (queues_dir / "gpu.yaml").unlink()
    os.symlink(outside, queues_dir / "gpu.yaml")
    os.symlink("/etc/passwd", queues_dir / "to-passwd.yaml")
    os.symlink("/nonexistent/nothing", queues_dir / "dangling.yaml")
    os.mkfifo(queues_dir / "a-fifo.yaml")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(queues_dir / "a-socket.yaml"))
    (queues_dir / "a-folder.yaml").mkdir()
    (queues_dir / "huge.yaml").write_bytes(b"concurrency: 2\n#" + b"x" * 5000 + b"\n")
    (queues_dir / "not a queue!.yaml").write_text("concurrency: 1\n")
    (queues_dir / "no-suffix").write_text("concurrency: 1\n")
    broken = {"gpu", "to-passwd", "dangling", "a-fifo", "a-socket", "a-folder", "huge"}
    try:
        coordinator = procs.start("coordinator", name="coordinator")

        def synced() -> dict[str, Any] | None:
            rows = sp.ledger.queue_limit_rows()
            others = all(rows.get(name, (None, None))[1] for name in broken - {"gpu"})
            return rows if others and rows["gpu"][2] != gpu_seen else None

        rows = wait_until(synced, timeout=60, message="the coordinator's sync of every queue file")
        assert coordinator.poll() is None, "the coordinator died"
    finally:
        server.close()
    assert isinstance(rows, dict) and set(rows) == broken, sorted(rows)
    for name in broken - {"gpu"}:
        assert rows[name][0] == Limits(), f"{name}: {rows[name]}"
    assert rows["gpu"][1] and rows["gpu"][0] == Limits(concurrency=1), f"gpu: the symlink's target read? {rows['gpu']}"
    assert "root:" not in str(rows)
    listed = run_spool("queue", "list", "--json", spool=spool_dir)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert {v["name"] for v in json.loads(listed.stdout) if v["error"]} == broken, listed.stdout
    assert "Traceback" not in procs.output()
    check = run_spool("fsck", spool=spool_dir)
    assert check.returncode == 0, check.stdout + check.stderr
    sp.close()


# -- spool submit -f: a sample of the same files through the command line ----------------------------


def _submit_file(spool_dir: Path, path: Path) -> None:
    done = run_spool("submit", "-f", str(path), spool=spool_dir)
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 0:
        job_id = done.stdout.strip()
        assert is_valid_id(job_id) and (spool_dir / "pending" / f"{job_id}.yaml").exists(), done.stdout
        return
    assert done.returncode in (2, 3), (done.returncode, done.stderr)
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, f"not one line: {done.stderr!r}"


@pytest.mark.parametrize(
    "what",
    [
        "random bytes",
        "utf-16",
        "very deep nesting",
        "over the size limit",
        "alias bomb",
        "python tag",
        "NUL in id",
        "depends_on traversal",
        "depends_on missing",
    ],
)
def test_submit_f_refuses_hostile_files_with_one_line(spool_dir: Path, tmp_path: Path, what: str) -> None:
    sp = Spool(spool_dir, environ={})
    victim = sp.submit("echo", {}, key="victim")
    before = (spool_dir / "pending" / f"{victim}.yaml").read_bytes()
    path = tmp_path / "job.yaml"
    path.write_bytes(REFUSED[what])
    done = run_spool("submit", "-f", str(path), spool=spool_dir)
    assert done.returncode in (2, 3), (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert set(os.listdir(spool_dir / "pending")) - {".wake"} == {f"{victim}.yaml"}
    assert (spool_dir / "pending" / f"{victim}.yaml").read_bytes() == before
    sp.close()


def test_submit_f_through_a_symlink_to_passwd_is_a_clear_error(spool_dir: Path, tmp_path: Path) -> None:
    os.symlink("/etc/passwd", tmp_path / "job.yaml")
    done = run_spool("submit", "-f", str(tmp_path / "job.yaml"), spool=spool_dir)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=drop_bytes)
def test_submit_f_fuzzed(spool_dir: Path, tmp_path: Path, data: bytes) -> None:
    path = tmp_path / f"job-{hashlib.sha256(data).hexdigest()[:12]}.yaml"
    path.write_bytes(data)
    _submit_file(spool_dir, path)


def test_the_oracle_agrees_with_ingest_on_validity() -> None:
    """``ingest_and_check`` compares a valid drop with the parser's own reading: make sure the
    parser does refuse what the REFUSED table lists, so that comparison can't pass vacuously."""
    for what, data in REFUSED.items():
        with pytest.raises((InvalidJob, NotFound)):
            spec = load_yaml(data, max_bytes=65536, source=what)
            job = Job.from_spec(cast(Any, spec), job_id=new_id(), default_max_tries=3, default_timeout=60, where=what)
            if job.depends_on:
                raise NotFound(what)
