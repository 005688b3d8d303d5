"""What ``spool logs`` prints: an attempt's log, streamed in chunks, once or following the job.

A log is capped by its worker (``spool.attemptlog``), but one written by an older version may
not be: nothing here ever holds a whole log in memory, ``--json`` included.
"""

from __future__ import annotations

import codecs
import json
import sys
import time
from typing import BinaryIO

import click

from spool.attemptlog import LogReader
from spool.base.errors import NotFound
from spool.job import JobFile
from spool.disk import State, log_name
from spool.spool import Spool

FOLLOW_POLL_SECONDS = 0.2
_GONE_POLLS = 25  # a job not found this many polls running was purged, not caught mid-move


def attempt_to_show(sp: Spool, job_id: str, attempt: int | None, follow: bool) -> int:
    """The attempt ``spool logs`` shows: ``--attempt N``, else the latest (the first, following a
    job that has not started). NotFound for one that has not started, unless following."""
    _, job_file = sp.job(job_id)
    latest = job_file.attempt
    if follow:
        return attempt or max(latest, 1)
    if attempt is None:
        if latest < 1:
            raise NotFound(f"{job_id}: no attempt has started yet (use --follow to wait for it)")
        return latest
    if attempt > latest:
        raise NotFound(f"{job_id}: no attempt {attempt} (job has {latest})")
    return attempt


def _reader(sp: Spool, job_id: str, attempt: int) -> LogReader:
    return LogReader(sp.layout.fd("logs"), log_name(job_id, attempt))


def print_log(sp: Spool, job_id: str, attempt: int, out: BinaryIO | None = None) -> None:
    out = out or sys.stdout.buffer
    reader = _reader(sp, job_id, attempt)
    try:
        for chunk in reader.chunks():
            out.write(chunk)
    finally:
        reader.close()
    out.flush()


def print_log_json(sp: Spool, job_id: str, attempt: int, out: BinaryIO | None = None) -> None:
    """One JSON document, ``{"id", "attempt", "log"}``, written as the log is read."""
    out = out or sys.stdout.buffer
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out.write(f'{{"id": {json.dumps(job_id)}, "attempt": {attempt}, "log": "'.encode())
    reader = _reader(sp, job_id, attempt)
    try:
        for chunk in reader.chunks():
            out.write(json.dumps(decoder.decode(chunk))[1:-1].encode())
    finally:
        reader.close()
    out.write(json.dumps(decoder.decode(b"", final=True))[1:-1].encode() + b'"}\n')
    out.flush()


def follow_log(sp: Spool, job_id: str, attempt: int, *, only_this: bool) -> None:
    """Print attempt ``attempt``'s log as it grows (waiting for it to start), then each later
    attempt's unless ``only_this``, until the job is done or dead. The worker finishes a log
    before it moves the job, so the read after the job's state says "ended" is the last."""
    number = attempt
    while True:
        state, job_file = _wait_for_news(sp, job_id, number, None)
        reader = _reader(sp, job_id, number)
        try:
            while True:
                for chunk in reader.chunks():
                    sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                if state.terminal or job_file.attempt > number:
                    break
                state, job_file = _wait_for_news(sp, job_id, number, FOLLOW_POLL_SECONDS)
        finally:
            reader.close()
        if job_file.attempt < number:
            raise NotFound(f"{job_id}: {state.value} without an attempt {number}")
        if only_this or job_file.attempt == number:  # then the job has ended
            return
        # A later attempt started (it may even have ended, between two looks): show it too.
        number += 1
        click.echo(f"spool: attempt {number} of {job_id}", err=True)


def _wait_for_news(sp: Spool, job_id: str, number: int, pause: float | None) -> tuple[State, JobFile]:
    """The job's state and file after ``pause`` (None: now), waiting while attempt ``number``
    has not started and the job has not ended. A job caught mid-move (found in no folder) is
    looked at again."""
    gone = 0
    while True:
        if pause is not None:
            time.sleep(pause)
        pause = FOLLOW_POLL_SECONDS
        try:
            state, job_file = sp.job(job_id)
        except NotFound:
            gone += 1
            if gone >= _GONE_POLLS:
                raise
            continue
        if state.terminal or job_file.attempt >= number:
            return state, job_file
