"""Issue 7, findings 1 and 11 in-process: settings ranges, environment warnings, the bounded job file."""

from __future__ import annotations

import pytest

from spool.base import crash
from spool.base.errors import UsageError
from spool.job import MAX_ATTEMPT_RECORDS, Job, JobFile, bounded_attempts, decode, encode, encode_measured, short_error
from spool.base.records import Attempt
from spool.settings import MAX_JOB_BYTES, MAX_RESULT_BYTES, environment_warnings, load_settings, parse_duration
from spool.moves.store import RUNNER_FILE_MAX_BYTES


def usage_error(environ: dict[str, str]) -> str:
    with pytest.raises(UsageError) as caught:
        load_settings(None, environ, {})
    return str(caught.value)


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("SPOOL_MAX_JOB_BYTES", "999999999999999gib", "is too big: at most 16,777,216 bytes"),
        ("SPOOL_MAX_JOB_BYTES", "17MiB", "is too big"),
        ("SPOOL_MAX_RESULT_BYTES", "2GiB", "is too big: at most 1,073,741,824 bytes"),
        ("SPOOL_MAX_TRIES", "5000", "expected a whole number from 1 to 1000"),
        ("SPOOL_LEASE_SECONDS", "99999999999d", "is too far: at most 100 years"),
        ("SPOOL_DEFAULT_TIMEOUT_SECONDS", "36600000d", "is too far"),
    ],
)
def test_settings_have_sane_maximums_and_name_their_source(name: str, value: str, words: str) -> None:
    message = usage_error({name: value})
    assert message.startswith(f"env {name}: ") and words in message, message


def test_the_maximums_themselves_are_accepted() -> None:
    got = load_settings(
        None, {"SPOOL_MAX_JOB_BYTES": "16MiB", "SPOOL_MAX_RESULT_BYTES": "1GiB", "SPOOL_MAX_TRIES": "1000"}, {}
    )
    assert (got.max_job_bytes, got.max_result_bytes, got.max_tries) == (MAX_JOB_BYTES, MAX_RESULT_BYTES, 1000)
    assert parse_duration("36500d") == 36500 * 86400.0


def test_unknown_spool_names_are_returned_as_warnings_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {
        "SPOOL_LEASE_SECOND": "3",
        "SPOOL_WHATEVER": "1",
        "SPOOL_DIR": "/x",
        "SPOOL_CRASH_AT": "a:b",
        "SPOOL_PARENT_PID": "1",
        "SPOOL_JOB_ID": "01A",
        "SPOOL_ATTEMPT": "2",
        "SPOOL_CHAOS_SEED": "3",
        "SPOOL_MAX_TRIES": "4",
        "OTHER": "x",
    }
    assert environment_warnings(environ) == [
        "SPOOL_LEASE_SECOND is not a setting; did you mean SPOOL_LEASE_SECONDS?",
        "SPOOL_WHATEVER is not a setting",
    ]
    assert load_settings(None, environ, {}).warnings == tuple(environment_warnings(environ))
    assert capsys.readouterr() == ("", "")


def test_an_unknown_crash_point_gets_a_suggestion() -> None:
    assert crash.unknown_target("submit:after-commit") is None
    assert "did you mean submit:after-commit?" in (crash.unknown_target("submit:after-comit") or "")
    assert "submit has after-key-check" in (crash.unknown_target("submit:nope") or "")
    assert (
        crash.unknown_target("nobody:nothing") == "SPOOL_CRASH_AT=nobody:nothing is not a crash point "
        "(see `spool crash-points`)"
    )


def failed_file(attempts: int, error: str) -> JobFile:
    job = Job(id="01M8RAAAAAAAAAAAAAAAAAAAAA", key="k", task="echo", args={"a": "b"}, max_tries=1000)
    records = tuple(
        Attempt(
            attempt=n,
            worker="w" * 200,
            started="2026-12-01T00:00:00.000Z",
            ended="2026-12-01T00:00:01.000Z",
            outcome="failed",
            error=error,
        )
        for n in range(1, attempts + 1)
    )
    return JobFile(
        job=job,
        submitted_at="2026-12-01T00:00:00.000Z",
        attempt=attempts,
        tries=attempts,
        reason="failed",
        error=error,
        attempts=records,
    )


def test_the_runner_part_of_a_file_stays_bounded_and_reads_back() -> None:
    error = "\x01\x02 " * 3000 + "\nValueError: " + "\x7f" * 500  # YAML escapes control bytes fourfold
    job_file = failed_file(1000, error)
    data = encode(job_file)
    assert len(data) < RUNNER_FILE_MAX_BYTES - MAX_JOB_BYTES, len(data)
    back = decode(data, source="t", expected_id=job_file.id, max_bytes=RUNNER_FILE_MAX_BYTES)
    assert len(back.attempts) == MAX_ATTEMPT_RECORDS and back.attempts_dropped == 1000 - MAX_ATTEMPT_RECORDS
    assert [r.attempt for r in back.attempts] == list(range(901, 1001))
    assert back.attempts[-1].error.endswith("\x7f" * 100) and len(back.attempts[-1].error.encode()) <= 4096
    assert all(len(r.error.encode()) <= 200 and r.error.startswith("ValueError") for r in back.attempts[:-1])
    again = decode(
        encode(back.replace(attempts=back.attempts + (Attempt(1001, None, None),))),
        source="t",
        expected_id=job_file.id,
        max_bytes=RUNNER_FILE_MAX_BYTES,
    )
    assert again.attempts_dropped == 901 and again.attempts[-1].attempt == 1001


def test_a_short_history_is_written_as_it_is() -> None:
    job_file = failed_file(3, "Traceback\n  line\nValueError: no")
    dropped, records = bounded_attempts(job_file.attempts)
    assert dropped == 0 and [r["error"] for r in records] == [
        "ValueError: no",
        "ValueError: no",
        "Traceback\n  line\nValueError: no",
    ]
    assert "attempts_dropped" not in encode(job_file).decode()


def test_short_error_keeps_the_last_line_within_200_bytes() -> None:
    assert short_error("a\nb\n\n") == "b"
    assert short_error("") == ""
    cut = short_error("x\n" + "é" * 300)
    assert len(cut.encode()) <= 200 and cut.endswith("...")


def test_encode_measured_is_encode_and_measures_the_spec() -> None:
    job = Job(
        id="01M8RAAAAAAAAAAAAAAAAAAAAA",
        key="01M8RAAAAAAAAAAAAAAAAAAAAA",
        task="echo",
        args={"text": "é\x01", "n": [1, {"b": None}]},
        not_before="2026-12-01T00:00:00.000Z",
        depends_on=("01M8RBBBBBBBBBBBBBBBBBBBBB",),
    )
    for job_file in (JobFile(job=job, submitted_at="t"), failed_file(5, "E")):
        data, spec_bytes = encode_measured(job_file)
        assert data == encode(job_file)
        assert 0 < spec_bytes < len(data)


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"a": ""},
        {"a": "x " * 500},
        {"a": "line\n" * 300},
        {"é": "ünïcödé ☃" * 50},
        {"q": "'\"" * 40},
        {"n": [1, 2.5, None, True, [], {}], "m": {"k": [{"x": "y"}] * 30}},
        {"a": "\x00\x01" * 100},
        {"long": " ".join(["word"] * 2000)},
        {"yes": "on", "num": "0123", "date": "2026-12-01"},
    ],
)
def test_the_size_floor_is_never_above_the_real_size(args: dict[str, object]) -> None:
    from spool.moves.submission import yaml_size_floor
    from spool.yaml.safe import dump_yaml

    assert yaml_size_floor(args) <= len(dump_yaml(args))
