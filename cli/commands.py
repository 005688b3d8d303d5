"""Commands that submit, inspect and manage jobs: each parses, calls spool/, renders."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from spool import admin, crash
from spool.errors import InvalidJob, LedgerError, NotFound, UsageError
from spool.fsck import fsck as run_fsck
from spool.ids import is_valid_id
from spool.layout import MARKER, State, init_spool
from spool.settings import parse_duration
from spool.spool import Spool, build_spec, resolve_root
from spool.workers import handlers_of, live_workers, unhandled_warning
from spool.stats import ids_from_files, ledger_trouble
from spool.yamlsafe import load_yaml
from spool.cli.main import App, cli, common, merge_common, pass_app
from spool.cli.render import echo_json, render_stats, render_status, render_table


@cli.command()
@click.option("--group-shared", is_flag=True, help="Make the spool group-readable and writable (0770).")
@common
@pass_app
def init(app: App, group_shared: bool, spool_dir: str | None, json_output: bool) -> None:
    """Create a spool's layout."""
    merge_common(app, spool_dir, json_output)
    root = resolve_root(app.spool_dir, os.environ)
    existed = (root / MARKER).exists()
    root = init_spool(root, group_shared=group_shared)
    if app.json_output:
        echo_json({"spool": str(root), "created": not existed})
    else:
        click.echo(f"initialised spool at {root}")


def _parse_args(pairs: tuple[str, ...], args_json: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if args_json is not None:
        try:
            loaded = json.loads(args_json)
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
                args[name] = json.loads(value)
            except ValueError as err:
                raise UsageError(f"-a {name}:={value}: not JSON ({err})") from None
        else:
            args[name] = value
    return args


@cli.command()
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
@common
@pass_app
def submit(app: App, task: str | None, arg_pairs: tuple[str, ...], args_json: str | None, job_file: str | None,
           key: str | None, priority: int | None, max_tries: int | None, timeout_text: str | None,
           delay_text: str | None, depends_on: str | None, spool_dir: str | None, json_output: bool) -> None:
    """Submit a job; prints only its id (the existing id for a key seen before)."""
    merge_common(app, spool_dir, json_output)
    crash.arm("submit", os.environ)
    sp = app.spool()
    if job_file is not None:
        if task or arg_pairs or args_json:
            raise UsageError("-f takes the whole job from the file; don't give TASK or -a too")
        data = sys.stdin.buffer.read(sp.settings.max_job_bytes + 1) if job_file == "-" else _read_job_file(
            Path(job_file), sp.settings.max_job_bytes)
        spec = load_yaml(data, max_bytes=sp.settings.max_job_bytes, source=job_file)
        if not isinstance(spec, dict):
            raise InvalidJob(f"{job_file}: expected a mapping of job fields")
        overrides = build_spec("x", key=key, priority=priority, max_tries=max_tries,
                               timeout=_duration("--timeout", timeout_text),
                               delay_seconds=_duration("--delay", delay_text), depends_on=_ids(depends_on))
        spec.update({k: v for k, v in overrides.items() if k not in ("task", "args")})
        where = job_file
    else:
        if not task:
            raise UsageError("submit needs TASK (or -f FILE)")
        spec = build_spec(task, _parse_args(arg_pairs, args_json), key=key, priority=priority, max_tries=max_tries,
                          timeout=_duration("--timeout", timeout_text),
                          delay_seconds=_duration("--delay", delay_text), depends_on=_ids(depends_on))
        where = "submit"
    submitted = sp.submit_spec(spec, where=where)
    if app.json_output:
        echo_json({"id": submitted.id, "created": submitted.created})
    else:
        click.echo(submitted.id)


def _duration(flag: str, text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_duration(text)
    except UsageError as err:
        raise UsageError(f"{flag}: {err}") from None


class UnhandledWatch:
    """For `spool wait`: one warning per task when a job it waits for is pending and no live
    worker handles its task, after a grace (a worker starting up has not advertised yet)."""

    GRACE_SECONDS = 3.0
    EVERY_SECONDS = 1.0

    def __init__(self, sp: Any) -> None:
        self.sp = sp
        self.started = time.monotonic()
        self.last = -1e18
        self.tasks: dict[str, str] = {}  # job id -> task, read once
        self.warned: set[str] = set()

    def check(self, states: dict[str, State | None]) -> list[str]:
        now = time.monotonic()
        if now - self.started < self.GRACE_SECONDS or now - self.last < self.EVERY_SECONDS:
            return []
        self.last = now
        pending = [job_id for job_id, state in states.items() if state is State.PENDING]
        if not pending:
            return []
        workers, lines = live_workers(self.sp), []
        for job_id in pending:
            if job_id not in self.tasks:
                try:
                    self.tasks[job_id] = self.sp.job(job_id)[1].job.task
                except (NotFound, InvalidJob, OSError):
                    continue  # moved on since we looked
            task = self.tasks[job_id]
            if task not in self.warned and handlers_of(workers, task) == []:
                self.warned.add(task)
                lines.append(f"job {job_id}: {unhandled_warning(task)}; still waiting")
        return lines


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


@cli.command()
@click.argument("job_id")
@common
@pass_app
def status(app: App, job_id: str, spool_dir: str | None, json_output: bool) -> None:
    """A job's state, tries, attempts, lease, error and result path."""
    merge_common(app, spool_dir, json_output)
    from spool.stats import coordinator_state

    sp = app.spool()
    view = sp.status(job_id)
    view["coordinator"] = coordinator_state(sp)  # "no coordinator since T" while none runs
    if view["state"] in (State.PENDING.value, State.WAITING.value):
        handlers = handlers_of(live_workers(sp), view["task"])
        if handlers is not None:
            view["handled_by"] = handlers
            if not handlers:
                view["warning"] = unhandled_warning(view["task"])
    try:
        sp.ledger.meta("coordinator_seen")
    except LedgerError as err:  # the status came from the files; say why the index was not used
        click.echo(f"spool: {ledger_trouble(sp, err)}", err=True)
    if app.json_output:
        echo_json(view)
    else:
        render_status(view, {dep: _state_word(sp, dep) for dep in view["depends_on"]})


def _state_word(sp: Spool, job_id: str) -> str:
    state = sp.state(job_id)
    return state.value if state else "purged"


@cli.command()
@click.argument("job_id")
@common
@pass_app
def result(app: App, job_id: str, spool_dir: str | None, json_output: bool) -> None:
    """Print a job's result JSON (exit 1 for a dead job, 3 before there is one)."""
    merge_common(app, spool_dir, json_output)
    echo_json(app.spool().result(job_id))


@cli.command()
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", "timeout_text", metavar="S", help="Give up after this long (exit 124).")
@common
@pass_app
def wait(app: App, job_ids: tuple[str, ...], timeout_text: str | None, spool_dir: str | None,
         json_output: bool) -> None:
    """Block until every job is done or dead; exit 1 if any is dead, 124 on timeout."""
    merge_common(app, spool_dir, json_output)
    sp = app.spool()
    deadline = time.monotonic() + parse_duration(timeout_text) if timeout_text else None
    show_progress = sys.stderr.isatty() and not app.json_output
    unhandled = UnhandledWatch(sp)
    while True:
        states = {job_id: sp.state(job_id) for job_id in job_ids}
        missing = [job_id for job_id, state in states.items() if state is None]
        if missing:
            raise NotFound(f"no job {missing[0]}")
        ended = sum(1 for state in states.values() if state and state.terminal)
        for line in unhandled.check(states):
            click.echo(("\n" if show_progress else "") + f"spool: warning: {line}", err=True)
        if show_progress:
            done = sum(1 for state in states.values() if state is State.DONE)
            width = 30
            filled = width * ended // len(states)
            click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {ended}/{len(states)} ended, {done} done",
                       err=True, nl=False)
        if ended == len(states) or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(0.1)
    if show_progress:
        click.echo("", err=True)
    view = {job_id: state.value if state else None for job_id, state in states.items()}
    if app.json_output:
        echo_json(view)
    else:
        for job_id, state_name in view.items():
            click.echo(f"{job_id} {state_name}")
    if ended < len(states):
        sys.exit(124)
    if any(state is State.DEAD for state in states.values()):
        sys.exit(1)


@cli.command(name="ls")
@click.option("--state", "state_name", type=click.Choice([s.value for s in State]), help="Only this state.")
@click.option("--reason", type=click.Choice(["failed", "expired", "skipped", "cancelled", "invalid"]))
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many, newest first.")
@common
@pass_app
def ls_command(app: App, state_name: str | None, reason: str | None, limit: int | None, spool_dir: str | None,
               json_output: bool) -> None:
    """Jobs, newest first."""
    merge_common(app, spool_dir, json_output)
    sp = app.spool()
    views = []
    try:
        ids = sp.ledger.ids(state=state_name, reason=reason, limit=limit)
    except LedgerError as err:
        click.echo(f"spool: {ledger_trouble(sp, err)}", err=True)
        ids = ids_from_files(sp, state_name)
    for job_id in ids:
        if limit is not None and len(views) >= limit:  # the files' listing has no LIMIT of its own
            break
        try:
            view = sp.status(job_id)
        except (NotFound, InvalidJob, FileNotFoundError):
            continue  # moved or purged since the ledger listed it
        if reason is None or view["reason"] == reason:
            views.append(view)
    if app.json_output:
        echo_json(views)
    else:
        render_table(["id", "state", "task", "tries", "reason", "submitted"],
                     [[v["id"], v["state"], v["task"], f"{v['tries']}/{v['max_tries']}", v["reason"] or "",
                       v["submitted_at"]] for v in views])


@cli.command()
@common
@pass_app
def stats(app: App, spool_dir: str | None, json_output: bool) -> None:
    """Counts per state, throughput, oldest ready age, coordinator and workers seen."""
    merge_common(app, spool_dir, json_output)
    from spool.stats import collect

    view = collect(app.spool())
    if view["ledger"] != "ok":
        click.echo(f"spool: {view['ledger']}", err=True)
    echo_json(view) if app.json_output else render_stats(view)


@cli.command()
@click.argument("job_id", required=False)
@click.option("--all-dead", is_flag=True, help="Every dead job (that can run).")
@click.option("--task", help="With --all-dead: only this task.")
@click.option("--timeout", "timeout_text", metavar="S",
              help="With ID: wait at most this long for the job's lock (exit 75, nothing changed).")
@common
@pass_app
def requeue(app: App, job_id: str | None, all_dead: bool, task: str | None, timeout_text: str | None,
            spool_dir: str | None, json_output: bool) -> None:
    """Dead -> pending (or waiting) with a fresh set of tries; skipped children re-armed."""
    merge_common(app, spool_dir, json_output)
    crash.arm("admin", os.environ)
    sp = app.spool()
    if all_dead == bool(job_id):
        raise UsageError("requeue takes one ID or --all-dead")
    timeout_seconds = _duration("--timeout", timeout_text)
    ids = admin.requeue_all_dead(sp, task) if all_dead else [job_id] if sp.requeue(
        job_id, timeout_seconds=timeout_seconds, on_wait=_say_waiting) else []
    if app.json_output:
        echo_json({"requeued": ids})
    else:
        for requeued_id in ids:
            click.echo(f"{requeued_id} requeued")


def _say_waiting(what: str) -> None:
    """A person waiting on a job's lock hears why (a stopped process may hold it for ever)."""
    click.echo(f"spool: {what}", err=True)


@cli.command()
@click.argument("job_id")
@click.option("--timeout", "timeout_text", metavar="S",
              help="Wait at most this long for the job's lock (exit 75, nothing changed).")
@common
@pass_app
def cancel(app: App, job_id: str, timeout_text: str | None, spool_dir: str | None, json_output: bool) -> None:
    """Pending/waiting -> dead (cancelled); a leased job's worker kills it at its next heartbeat."""
    merge_common(app, spool_dir, json_output)
    crash.arm("admin", os.environ)
    timeout_seconds = _duration("--timeout", timeout_text)
    outcome = app.spool().cancel(job_id, timeout_seconds=timeout_seconds, on_wait=_say_waiting)
    if app.json_output:
        echo_json({"id": job_id, "cancel": outcome})
    else:
        click.echo(f"{job_id} cancelled" if outcome == "cancelled" else
                   f"{job_id} is running; its worker will kill it at its next heartbeat")


@cli.command()
@click.option("--repair", is_flag=True, help="Fix what can be fixed and rebuild the ledger from the files.")
@common
@pass_app
def fsck(app: App, repair: bool, spool_dir: str | None, json_output: bool) -> None:
    """Check every promise on disk; exit 0 when all hold, 1 otherwise."""
    merge_common(app, spool_dir, json_output)
    report = run_fsck(app.spool(), repair=repair)
    if app.json_output:
        echo_json({"ok": report.ok, "jobs": report.jobs, "violations": report.violations,
                   "in_progress": report.in_progress, "garbage": report.garbage, "repaired": report.repaired})
    else:
        for line in report.repaired:
            click.echo(f"repaired: {line}")
        for line in report.in_progress:
            click.echo(f"in progress: {line}")
        for line in report.garbage:
            click.echo(f"garbage: {line}")
        for line in report.violations:
            click.echo(f"VIOLATION: {line}")
        click.echo(f"{report.jobs} jobs checked: " + ("every promise holds" if report.ok else
                                                      f"{len(report.violations)} violation(s)"))
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="Like 7d, 12h, 30m.")
@click.option("--state", "state_names", default="done,dead", show_default=True, help="Comma-separated.")
@common
@pass_app
def purge(app: App, older_than: str, state_names: str, spool_dir: str | None, json_output: bool) -> None:
    """Remove old finished jobs with their results, logs and keys."""
    merge_common(app, spool_dir, json_output)
    crash.arm("admin", os.environ)
    try:
        states = [State(name.strip()) for name in state_names.split(",") if name.strip()]
    except ValueError:
        raise UsageError(f"--state {state_names!r}: expected done and/or dead") from None
    purged = admin.purge(app.spool(), parse_duration(older_than), states, on_wait=_say_waiting)
    echo_json({"purged": purged}) if app.json_output else click.echo(f"purged {len(purged)} job(s)")


@cli.command()
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=1), help="This attempt (default the latest).")
@click.option("--follow", is_flag=True,
              help="Keep printing as the job runs (waiting for its first attempt), until it is done or dead.")
@common
@pass_app
def logs(app: App, job_id: str, attempt: int | None, follow: bool, spool_dir: str | None, json_output: bool) -> None:
    """An attempt's stdout and stderr (its last max_log_bytes)."""
    merge_common(app, spool_dir, json_output)
    from spool.cli import logview

    if follow and app.json_output:
        raise UsageError("--json prints one document; it does not go with --follow")
    sp = app.spool()
    number = logview.attempt_to_show(sp, job_id, attempt, follow)
    if app.json_output:
        logview.print_log_json(sp, job_id, number)
    elif follow:
        logview.follow_log(sp, job_id, number, only_this=attempt is not None)
    else:
        logview.print_log(sp, job_id, number)


@cli.command()
@common
@pass_app
def config(app: App, spool_dir: str | None, json_output: bool) -> None:
    """The settings in force and where each came from."""
    merge_common(app, spool_dir, json_output)
    rows = app.spool().settings.describe()
    if app.json_output:
        echo_json({name: {"value": list(value) if isinstance(value, tuple) else value, "source": source}
                   for name, value, source in rows})
    else:
        render_table(["setting", "value", "from"], [[name, _show(value), source] for name, value, source in rows])


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


@cli.command(name="crash-points")
@click.option("--json", "json_output", is_flag=True, default=False)
@pass_app
def crash_points(app: App, json_output: bool) -> None:
    """Every SPOOL_CRASH_AT name."""
    points = crash.all_points()
    echo_json(points) if app.json_output or json_output else click.echo("\n".join(points))
