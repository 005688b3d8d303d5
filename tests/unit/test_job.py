"""spool.job: what a user may write in a job, what the runner adds, and that a file reads back as written."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, UTC

import pytest

from spool import job as jobs
from spool.base.errors import InvalidJob
from spool.job import Job, JobFile, decode, encode, tail
from spool.base.records import Attempt, Lease
from spool.base.timetext import format_time, parse_time

ID = "01JDZ8Q3V7K2M4N5P6R7S8T9VW"


def spec_job(spec: object, **kwargs: object) -> Job:
    options = {"job_id": ID, "default_max_tries": 3, "default_timeout": 3600.0, "where": "job.yaml", **kwargs}
    return Job.from_spec(spec, **options)  # type: ignore[arg-type]


def refused(spec: object) -> str:
    with pytest.raises(InvalidJob) as info:
        spec_job(spec)
    message = str(info.value)
    assert message.startswith("job.yaml: ") and "\n" not in message
    return message


def test_a_minimal_spec_gets_the_defaults_and_its_id_as_key() -> None:
    job = spec_job({"task": "wordcount"})
    assert job == Job(id=ID, key=ID, task="wordcount", args={}, priority=0, max_tries=3, timeout=3600.0)
    assert not job.has_own_key
    assert spec_job({"task": "wordcount", "key": "k"}).has_own_key


def test_settings_defaults_are_frozen_into_the_job() -> None:
    job = spec_job({"task": "t"}, default_max_tries=7, default_timeout=12.5)
    assert (job.max_tries, job.timeout) == (7, 12.5)
    assert spec_job({"task": "t", "max_tries": 2, "timeout": 5}, default_max_tries=7).max_tries == 2


def test_a_full_spec_is_kept() -> None:
    job = spec_job(
        {
            "spool_format": 1,
            "key": "invoice-1",
            "task": "shell",
            "args": {"argv": ["ls", "-l"]},
            "priority": -5,
            "max_tries": 10,
            "timeout": 1.5,
            "not_before": "2026-11-30T13:00:00+01:00",
            "depends_on": ["A1", "B2", "A1"],
        }
    )
    assert job.key == "invoice-1" and job.task == "shell" and job.args == {"argv": ["ls", "-l"]}
    assert (job.priority, job.max_tries, job.timeout) == (-5, 10, 1.5)
    assert job.not_before == "2026-11-30T12:00:00.000Z"  # normalised to UTC
    assert job.depends_on == ("A1", "B2")  # duplicates dropped, order kept


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ([1, 2], "expected a mapping of job fields, got a list"),
        ("task: x", "expected a mapping of job fields, got text"),
        ({"task": "x", "id": "A"}, "ids are assigned by spool"),
        ({"task": "x", "colour": "red"}, "unknown field 'colour'"),
        ({"task": "x", "spool_format": 2}, "field 'spool_format': expected 1, got 2"),
        ({"task": "x", "spool_format": True}, "field 'spool_format'"),
        ({}, "field 'task'"),
        ({"task": "../etc"}, "field 'task'"),
        ({"task": 5}, "field 'task'"),
        ({"task": "x", "key": ""}, "field 'key'"),
        ({"task": "x", "key": 5}, "field 'key'"),
        ({"task": "x", "key": "a\x00b"}, "field 'key'"),
        ({"task": "x", "key": "k" * 513}, "field 'key'"),
        ({"task": "x", "args": [1]}, "field 'args'"),
        ({"task": "x", "args": {1: 2}}, "field 'args'"),
        ({"task": "x", "args": {"a": math.nan}}, "not a finite number"),
        ({"task": "x", "args": {"a": {1: "b"}}}, "mapping keys must be strings"),
        ({"task": "x", "args": {"a": object()}}, "is not plain data"),
        ({"task": "x", "priority": "high"}, "field 'priority'"),
        ({"task": "x", "priority": True}, "field 'priority'"),
        ({"task": "x", "priority": 10**10}, "field 'priority'"),
        ({"task": "x", "max_tries": 0}, "field 'max_tries'"),
        ({"task": "x", "max_tries": 1001}, "field 'max_tries'"),
        ({"task": "x", "max_tries": 2.0}, "field 'max_tries'"),
        ({"task": "x", "timeout": 0}, "field 'timeout'"),
        ({"task": "x", "timeout": -1}, "field 'timeout'"),
        ({"task": "x", "timeout": math.inf}, "field 'timeout'"),
        ({"task": "x", "timeout": "5m"}, "field 'timeout'"),
        ({"task": "x", "not_before": "tomorrow"}, "field 'not_before'"),
        ({"task": "x", "not_before": "2026-11-30T12:00:00"}, "field 'not_before'"),  # no zone
        ({"task": "x", "depends_on": "A1"}, "field 'depends_on'"),
        ({"task": "x", "depends_on": ["../x"]}, "is not a job id"),
        ({"task": "x", "depends_on": ["A"] * 1001}, "field 'depends_on'"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_field(spec: object, words: str) -> None:
    assert words in refused(spec)


def test_deeply_nested_args_are_refused() -> None:
    value: object = "leaf"
    for _ in range(40):
        value = [value]
    assert "nested too deeply" in refused({"task": "x", "args": {"a": value}})


def full_file() -> JobFile:
    job = spec_job(
        {
            "key": "on",
            "task": "echo",
            "args": {
                "n": "0123",
                "yes": "yes",
                "date": "2026-01-01",
                "text": "line 1\nline 2\n",
                "null": None,
                "f": 1.5,
            },
            "not_before": "2026-11-30T12:00:00Z",
            "depends_on": ["A1"],
        }
    )
    return JobFile(
        job=job,
        submitted_at="2026-11-30T11:00:00.000Z",
        dropped_as="mine.yaml",
        attempt=2,
        tries=1,
        lease=Lease(ID, "w1", 2, claimed_at="2026-11-30T11:00:01.000Z"),
        backoff_seconds=1.25,
        reason=None,
        error="Traceback\n  boom\n",
        attempts=(
            Attempt(attempt=1, worker="w0", started="a", ended="b", outcome="failed", error="x"),
            Attempt(attempt=2, worker="w1", started="c", ended=None, outcome=None, error=None),
        ),
    )


def test_a_job_file_reads_back_exactly_as_written() -> None:
    original = full_file()
    data = encode(original)
    assert decode(data, source="leased/x.yaml", expected_id=ID, max_bytes=65536) == original
    dead = original.replace(
        lease=None, backoff_seconds=None, reason="skipped", skipped_because="A1", original="task: [unclosed"
    )
    assert decode(encode(dead), source="dead/x.yaml", expected_id=ID, max_bytes=65536) == dead


def test_the_file_says_everything_under_cat() -> None:
    text = encode(full_file()).decode()
    assert text.startswith("spool_format: 1\nid: " + ID + "\n")
    assert "key: 'on'" in text or 'key: "on"' in text  # a YAML 1.1 reader must not see a boolean
    assert "error: |" in text  # a traceback reads as a block


def test_decode_refuses_a_file_of_another_job() -> None:
    data = encode(full_file())
    with pytest.raises(InvalidJob, match="field 'id': expected OTHER"):
        decode(data, source="pending/OTHER.yaml", expected_id="OTHER", max_bytes=65536)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda m: m.update(colour="red"), "unknown field 'colour'"),
        (lambda m: m.pop("submitted_at"), "field 'submitted_at'"),
        (lambda m: m.update(attempt=-1), "'attempt'/'tries'"),
        (lambda m: m.update(tries="1"), "'attempt'/'tries'"),
        (lambda m: m.update(lease={"worker": "w"}), "field 'lease'"),
        (lambda m: m.update(attempts={"a": 1}), "field 'attempts'"),
        (lambda m: m.update(attempts=[{"attempt": 1, "worker": "w"}]), "field 'attempts'"),
        (lambda m: m.update(backoff_seconds=-1), "field 'backoff_seconds'"),
        (lambda m: m.update(reason="bored"), "field 'reason'"),
        (lambda m: m.update(error=5), "field 'error'"),
        (lambda m: m.update(id="../x"), "field 'id'"),
    ],
)
def test_decode_names_what_is_wrong_in_a_runner_file(change, words: str) -> None:  # type: ignore[no-untyped-def]
    mapping = full_file().to_mapping()
    change(mapping)
    data = jobs.dump_yaml(mapping)
    with pytest.raises(InvalidJob) as info:
        decode(data, source="pending/x.yaml", expected_id=None, max_bytes=65536)
    assert str(info.value).startswith("pending/x.yaml: ") and words in str(info.value)


@pytest.mark.parametrize(
    "data", [b"", b"spool_format: 1\nid: [", b"\xff\xfe", b"- a\n- b\n", b"!!python/object:os.system {}"]
)
def test_decode_turns_any_garbage_into_invalid_job(data: bytes) -> None:
    with pytest.raises(InvalidJob):
        decode(data, source="pending/x.yaml", expected_id=ID, max_bytes=65536)


def test_a_torn_file_is_invalid_at_every_cut() -> None:
    data = encode(full_file())
    for cut in range(0, len(data) - 1, 7):
        try:
            torn = decode(data[:cut], source="x", expected_id=ID, max_bytes=65536)
        except InvalidJob:
            continue
        # A cut that happens to end on a line boundary may still parse; it must not be mistaken
        # for the whole file.
        assert torn != full_file()


def test_end_attempt_closes_only_the_open_record_of_this_attempt() -> None:
    job_file = full_file()
    records = job_file.end_attempt(outcome="done", ended="z")
    assert records[0] == job_file.attempts[0]
    assert records[1] == Attempt(attempt=2, worker="w1", started="c", ended="z", outcome="done", error=None)
    closed = job_file.replace(attempts=records)
    assert closed.end_attempt(outcome="lost", ended="later") == records  # already closed: unchanged
    assert job_file.replace(attempt=3).end_attempt(outcome="lost", ended="z") == job_file.attempts


def test_tail_keeps_the_end_within_four_kib() -> None:
    assert tail("short") == "short"
    text = "".join(f"line {n}\n" for n in range(2000)) + "the error é\n"
    cut = tail(text)
    assert len(cut.encode()) <= 4096 and cut.startswith("...") and cut.endswith("the error é\n")


def test_times_are_rfc3339_utc_with_milliseconds() -> None:
    moment = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
    assert format_time(moment) == "2026-11-30T12:00:00.123Z"
    assert format_time(moment.timestamp()) == "2026-11-30T12:00:00.123Z"
    assert parse_time("2026-11-30T13:00:00.123+01:00", "t") == moment.replace(microsecond=123000)
    assert parse_time("2026-11-30t12:00:00z", "t").tzinfo is not None
    for bad in ("2026-11-30", "noon", 1234, None):
        with pytest.raises(InvalidJob, match="RFC 3339"):
            parse_time(bad, "t")


def test_a_jobs_front_is_encoded_once_and_every_rewrite_writes_what_one_whole_dump_would() -> None:
    from spool.yaml.safe import dump_yaml

    job = spec_job({"task": "wordcount", "args": {"path": "/data/in.txt", "words": ["on", "2026-01-01"]}})
    first = JobFile(job=job, submitted_at="2026-12-01T17:00:00.000Z")
    lease = Lease(job.id, "host-a:1", 1, "2026-12-01T17:00:01.000Z")
    opened = Attempt(1, "host-a:1", "2026-12-01T17:00:01.000Z", None, None, None)
    leased = first.replace(attempt=1, tries=1, lease=lease, attempts=(opened,))
    assert leased == dataclasses.replace(first, attempt=1, tries=1, lease=lease, attempts=(opened,))  # the short way
    for job_file in (first, leased, leased.replace(lease=None, error="Traceback:\n  boom\n")):
        assert encode(job_file) == dump_yaml(job_file.to_mapping())
        assert decode(encode(job_file), source="s", expected_id=job.id, max_bytes=1 << 20) == job_file
    assert job.front_yaml is job.front_yaml  # kept on the Job
    other = dataclasses.replace(job, priority=7)  # a new Job: its own front
    assert b"priority: 7\n" in other.front_yaml and b"priority: 0\n" in job.front_yaml
