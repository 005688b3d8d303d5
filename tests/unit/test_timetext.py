"""spool.base.timetext: the times a job file holds, written as before and always read back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

from spool.job import Job, JobFile, decode, encode
from spool.base.timetext import format_time, parse_time

ID = "01JDZ8Q3V7K2M4N5P6R7S8T9VW"


def strftime_format(moment: float | datetime) -> str:
    """format_time as it was written before (strftime), for years from 1000 on."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, tz=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def test_format_time_writes_what_strftime_wrote() -> None:
    rng = random.Random(9)
    for _ in range(20_000):
        seconds = rng.uniform(-30_000_000_000, 250_000_000_000)  # years ~1000 to ~9900
        seconds = rng.choice([seconds, round(seconds, 3), round(seconds, 3) + 0.0005, float(int(seconds))])
        assert format_time(seconds) == strftime_format(seconds), seconds
        zone = timezone(timedelta(minutes=rng.randrange(-23 * 60, 23 * 60)))
        moment = datetime.fromtimestamp(seconds, tz=zone)
        assert format_time(moment) == strftime_format(moment), moment


def test_a_year_before_1000_has_four_digits_and_reads_back() -> None:
    moment = parse_time("0999-01-02T03:04:05.678Z", "t")
    assert format_time(moment) == "0999-01-02T03:04:05.678Z"
    assert parse_time(format_time(moment), "t") == moment


def test_a_job_not_before_the_year_1000_reads_back_from_its_file() -> None:
    # strftime wrote "999-01-01T00:00:00.000Z": the runner's own file then failed to decode.
    spec = {"task": "wordcount", "not_before": "0999-01-01T00:00:00Z"}
    job = Job.from_spec(spec, job_id=ID, default_max_tries=3, default_timeout=3600.0, where="t")
    assert job.not_before == "0999-01-01T00:00:00.000Z"
    job_file = JobFile(job=job, submitted_at=format_time(0.0))
    assert decode(encode(job_file), source="t", expected_id=ID, max_bytes=1 << 16) == job_file
