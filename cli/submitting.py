"""``spool submit``: a job from TASK and ``-a`` arguments, or from a YAML job file."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from spool.base import crash
from spool.cli.app import App, example, command, flag_duration, pass_app
from spool.cli.render import echo_json
from spool.base.errors import InvalidJob, UsageError
from spool.disk import is_valid_id
from spool.spool import build_spec
from spool.yaml import load_yaml


@command(epilog=example("spool submit resize -a path=a.jpg -a width:=640 --key a", "spool submit -f job.yaml"))
@click.argument("task", required=False)
@click.option("-a", "arg_pairs", multiple=True, metavar="K=V|K:=JSON", help="An argument (string, or JSON with :=).")
@click.option("--args-json", metavar="JSON", help="All arguments as one JSON object.")
@click.option("-f", "job_file", type=click.Path(dir_okay=False, allow_dash=True), help="Submit a job file (YAML).")
@click.option("--key", help="Idempotency key: a key seen before returns the existing job's id.")
@click.option("--priority", type=int, help="Higher runs first (default 0).")
@click.option("--max-tries", type=int, help="Tries before the job is dead (default max_tries).")
@click.option("--timeout", "timeout_text", metavar="S", help="Seconds one attempt may run.")
@click.option("--delay", "delay_text", metavar="S", help="Not before this long from now (30s, 5m...).")
@click.option("--depends-on", metavar="ID,...", help="Run only after these jobs are done.")
@click.option("--queue", metavar="Q", help="The job's queue (default `default`): its limits hold it.")
@pass_app
def submit(
    app: App,
    task: str | None,
    arg_pairs: tuple[str, ...],
    args_json: str | None,
    job_file: str | None,
    key: str | None,
    priority: int | None,
    max_tries: int | None,
    timeout_text: str | None,
    delay_text: str | None,
    depends_on: str | None,
    queue: str | None,
) -> None:
    """Submit a job; prints only its id (the existing id for a key seen before)."""
    crash.arm("submit", os.environ)
    sp = app.spool()
    if job_file is not None:
        if task or arg_pairs or args_json:
            raise UsageError("-f takes the whole job from the file; don't give TASK or -a too")
        data = (
            sys.stdin.buffer.read(sp.settings.max_job_bytes + 1)
            if job_file == "-"
            else _read_job_file(Path(job_file), sp.settings.max_job_bytes)
        )
        spec = load_yaml(data, max_bytes=sp.settings.max_job_bytes, source=job_file)
        if not isinstance(spec, dict):
            raise InvalidJob(f"{job_file}: expected a mapping of job fields")
        overrides = build_spec(
            "x",
            key=key,
            priority=priority,
            max_tries=max_tries,
            timeout=flag_duration("--timeout", timeout_text),
            delay_seconds=flag_duration("--delay", delay_text),
            depends_on=_ids(depends_on),
            queue=queue,
        )
        spec.update({k: v for k, v in overrides.items() if k not in ("task", "args")})
        where = job_file
    else:
        if not task:
            raise UsageError("submit needs TASK (or -f FILE)")
        spec = build_spec(
            task,
            _parse_args(arg_pairs, args_json),
            key=key,
            priority=priority,
            max_tries=max_tries,
            timeout=flag_duration("--timeout", timeout_text),
            delay_seconds=flag_duration("--delay", delay_text),
            depends_on=_ids(depends_on),
            queue=queue,
        )
        where = "submit"
    submitted = sp.submit_spec(spec, where=where)
    if app.json_output:
        echo_json({"id": submitted.id, "created": submitted.created})
    else:
        click.echo(submitted.id)


def _parse_args(pairs: tuple[str, ...], args_json: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if args_json is not None:
        try:
            loaded = _load_json(args_json)
        except ValueError as err:
            raise UsageError(f"--args-json: not JSON ({err})") from None
        if not isinstance(loaded, dict):
            raise UsageError("--args-json: expected a JSON object")
        args.update(loaded)
    seen: set[str] = set()
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"-a {pair!r}: expected NAME=VALUE or NAME:=JSON")
        as_json = name.endswith(":")
        name = name[:-1] if as_json else name
        if not name:
            raise UsageError(f"-a {pair!r}: the name is empty")
        if name in seen:
            raise UsageError(f"-a {name}: given twice")
        seen.add(name)
        if as_json:
            try:
                args[name] = _load_json(value)
            except ValueError as err:
                raise UsageError(f"-a {name}:={value}: not JSON ({err})") from None
        else:
            args[name] = value
    return args


def _read_job_file(path: Path, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror}") from None
    return data


def _ids(text: str | None) -> list[str]:
    if not text:
        return []
    ids = [part.strip() for part in text.split(",") if part.strip()]
    for job_id in ids:
        if not is_valid_id(job_id):
            raise UsageError(f"--depends-on: {job_id!r} is not a job id")
    return ids


def _load_json(text: str) -> Any:
    """The value of one JSON text (ValueError if it is not JSON)."""
    import json  # start-up: only a submit given JSON (-a NAME:=JSON, --args-json) loads json

    return json.loads(text)
