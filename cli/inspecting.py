"""Commands that look without changing anything: status, result, wait, ls, stats, logs, config."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from spool.cli.app import App, example, command, pass_app
from spool.cli.render import echo_json, render_stats, render_status, render_table
from spool.base.errors import InvalidJob, NotFound, UsageError
from spool.disk import State
from spool.progress import Progress, read_progresses
from spool.schedule import key_prefix
from spool.settings import parse_duration
from spool.spool import Spool
from spool.views import collect, coordinator_state
from spool.workers import handlers_of, live_workers, unhandled_warning

WAIT_POLL_SECONDS = 0.1
PROGRESS_WIDTH = 30
WAIT_MESSAGE_CHARS = 40  # a handler's message beside the bar, cut so the line fits a terminal
LS_ROWS = 50  # what `spool ls` shows without --limit or --all


@command(epilog=example("spool status 01JD8Z5X4Q7V3K2M9N6P0R1S2T"))
@click.argument("job_id")
@pass_app
def status(app: App, job_id: str) -> None:
    """A job's state, tries, attempts, lease, error and result path."""
    sp = app.spool()
    view = sp.status(job_id)
    view["coordinator"] = coordinator_state(sp)  # "no coordinator since T" while none runs
    if view["state"] in (State.PENDING.value, State.WAITING.value):
        handlers = handlers_of(live_workers(sp), view["task"])
        if handlers is not None:
            view["handled_by"] = handlers
            if not handlers:
                view["warning"] = unhandled_warning(view["task"])
    trouble = sp.ledger_trouble()
    if trouble is not None:  # the status came from the files; say why the index was not used
        click.echo(f"spool: {trouble}", err=True)
    if app.json_output:
        echo_json(view)
    else:
        render_status(view, {parent["id"]: _link_word(parent) for parent in view["parents"]})
        if view["progress"] is not None:
            click.echo(f"{'progress:':<17}{progress_text(Progress(**view['progress']))}")


def progress_text(value: Progress) -> str:
    """``50% halfway``, ``50%``, or the message alone when the handler gave no fraction."""
    percent = f"{value.fraction * 100:.0f}%" if value.fraction is not None else ""
    return " ".join(part for part in (percent, value.message) if part) or "(no message)"


def _link_word(link: Mapping[str, Any]) -> str:
    return f"{link['state']}: {link['reason']}" if link.get("reason") else str(link["state"])


@command(epilog=example("spool result 01JD8Z5X4Q7V3K2M9N6P0R1S2T > result.json"))
@click.argument("job_id")
@pass_app
def result(app: App, job_id: str) -> None:
    """Print a job's result JSON (exit 1 for a dead job, 3 before there is one)."""
    echo_json(app.spool().result(job_id))


class UnhandledWatch:
    """For `spool wait`: one warning per task when a job it waits for is pending and no live
    worker handles its task, after a grace (a worker starting up has not advertised yet)."""

    GRACE_SECONDS = 3.0
    EVERY_SECONDS = 1.0

    def __init__(self, sp: Spool) -> None:
        self.sp = sp
        self.started = time.monotonic()
        self.last = -1e18
        self.tasks: dict[str, str] = {}  # job id -> task, read once
        self.warned: set[str] = set()

    def check(self, states: Mapping[str, State | None]) -> list[str]:
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


class WaitReport:
    """What `spool wait` says on stderr after each poll: unhandled-task warnings; on a terminal a
    progress bar redrawn in place (jobs ended, plus the running handlers' own ``spool.progress``
    fractions, and the message of the one running job when only one runs); otherwise one plain
    line each time a running job's progress changes."""

    def __init__(self, sp: Spool, *, show_progress: bool) -> None:
        self.sp = sp
        self.unhandled = UnhandledWatch(sp)
        self.show_progress = show_progress
        self.shown: dict[str, Progress] = {}  # job id -> the progress last printed as a line

    def __call__(self, states: Mapping[str, State]) -> None:
        for line in self.unhandled.check(states):
            click.echo(("\n" if self.show_progress else "") + f"spool: warning: {line}", err=True)
        leased = [job_id for job_id, state in states.items() if state is State.LEASED]
        running = read_progresses(self.sp, leased) if leased else {}
        if self.show_progress:
            click.echo("\r" + self._bar(states, running) + "\x1b[K", err=True, nl=False)
            return
        for job_id, value in running.items():
            if self.shown.get(job_id) != value:
                self.shown[job_id] = value
                click.echo(f"spool: {job_id}: {progress_text(value)}", err=True)

    @staticmethod
    def _bar(states: Mapping[str, State], running: Mapping[str, Progress]) -> str:
        ended = sum(1 for state in states.values() if state.terminal)
        done = sum(1 for state in states.values() if state is State.DONE)
        partial = sum(value.fraction or 0.0 for value in running.values())
        share = min(1.0, (ended + partial) / len(states))
        filled = int(PROGRESS_WIDTH * share)
        line = f"[{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] {share * 100:3.0f}% {ended}/{len(states)} ended"
        line += f", {done} done"
        if len(running) == 1:
            message = next(iter(running.values())).message
            if message:
                line += f"  {message[:WAIT_MESSAGE_CHARS]}"
        return line

    def finish(self) -> None:
        if self.show_progress:
            click.echo("", err=True)


@command(epilog=example('spool wait "$id" --timeout 5m && spool result "$id"'))
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", "timeout_text", metavar="S", help="Give up after this long (exit 124).")
@pass_app
def wait(app: App, job_ids: tuple[str, ...], timeout_text: str | None) -> None:
    """Block until every job is done or dead; exit 1 if any is dead, 124 on timeout."""
    sp = app.spool()
    timeout_seconds = parse_duration(timeout_text) if timeout_text else None
    report = WaitReport(sp, show_progress=sys.stderr.isatty() and not app.json_output)
    states = sp.wait(job_ids, timeout_seconds=timeout_seconds, poll_seconds=WAIT_POLL_SECONDS, on_poll=report)
    report.finish()
    view = {job_id: state.value for job_id, state in states.items()}
    if app.json_output:
        echo_json(view)
    else:
        for job_id, state_name in view.items():
            click.echo(f"{job_id} {state_name}")
    if not all(state.terminal for state in states.values()):
        sys.exit(124)
    if any(state is State.DEAD for state in states.values()):
        sys.exit(1)


@command(name="ls", epilog=example("spool ls --state dead --reason failed --limit 20"))
@click.option("--state", "state_name", type=click.Choice([s.value for s in State]), help="Only this state.")
@click.option(
    "--reason",
    type=click.Choice(["failed", "expired", "skipped", "cancelled", "invalid"]),
    help="Only dead jobs that ended for this reason.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help=f"At most this many, newest first (default {LS_ROWS}, with --json all; 0 lists none).",
)
@click.option("--all", "all_rows", is_flag=True, help=f"Every matching job, not only the newest {LS_ROWS}.")
@click.option("--task", help="Only jobs of this task.")
@click.option("--schedule", "schedule_name", metavar="NAME", help="Only jobs this schedule fired.")
@click.option("--queue", metavar="Q", help="Only jobs of this queue.")
@pass_app
def ls_command(
    app: App,
    state_name: str | None,
    reason: str | None,
    limit: int | None,
    all_rows: bool,
    task: str | None,
    schedule_name: str | None,
    queue: str | None,
) -> None:
    """Jobs, newest first: the newest 50 unless --limit or --all says otherwise; how many more
    match is said on stderr, so stdout (and --json) stays the rows alone. ``--json`` is for
    scripts (the spec of ls --json: "a list of such objects"): every match unless --limit says,
    as before the table's default limit, so a script never gets a silent 50."""
    if all_rows and limit is not None:
        raise UsageError("ls takes --limit N or --all, not both")
    if not all_rows and limit is None and not app.json_output:
        limit = LS_ROWS
    sp = app.spool()
    views: list[dict[str, Any]] = []
    prefix = key_prefix(schedule_name) if schedule_name else None
    troubles: list[str] = []

    def say_trouble(line: str) -> None:
        troubles.append(line)
        _say_trouble(line)

    # Every matching id (cheap: ids only), so the rows left out can be counted.
    found = sp.ids(state_name, reason=reason, on_trouble=say_trouble, task=task, key_prefix=prefix, queue=queue)
    left = 0
    for index, job_id in enumerate(found):
        if limit is not None and len(views) >= limit:  # the files' listing has no LIMIT of its own
            left = len(found) - index
            break
        try:
            view = sp.status(job_id)
        except (NotFound, InvalidJob, FileNotFoundError):
            continue  # moved or purged since the ledger listed it
        if (
            (reason is None or view["reason"] == reason)
            and task in (None, view["task"])
            and (schedule_name in (None, view["schedule"]))
            and queue in (None, view["queue"])
        ):
            views.append(view)
    if app.json_output:
        echo_json(views)
    else:
        _render_jobs(views)
    if left and limit:
        more = "more jobs may match" if troubles else f"{left} more"  # the folders' listing is unfiltered
        click.echo(f"... {more}; --limit N or --all to see them", err=True)


def _render_jobs(views: list[dict[str, Any]]) -> None:
    render_table(
        ["id", "state", "task", "queue", "tries", "reason", "submitted"],
        [
            [
                v["id"],
                v["state"],
                v["task"],
                v["queue"],
                f"{v['tries']}/{v['max_tries']}",
                v["reason"] or "",
                v["submitted_at"],
            ]
            for v in views
        ],
    )


def _say_trouble(line: str) -> None:
    click.echo(f"spool: {line}", err=True)


@command(epilog=example("spool stats --json"))
@pass_app
def stats(app: App) -> None:
    """Counts per state, throughput, oldest ready age, coordinator and workers seen."""
    view = collect(app.spool())
    if view["ledger"] != "ok":
        click.echo(f"spool: {view['ledger']}", err=True)
    echo_json(view) if app.json_output else render_stats(view)


@command(epilog=example("spool logs 01JD8Z5X4Q7V3K2M9N6P0R1S2T --follow"))
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=1), help="This attempt (default the latest).")
@click.option(
    "--follow",
    is_flag=True,
    help="Keep printing as the job runs (waiting for its first attempt), until it is done or dead.",
)
@pass_app
def logs(app: App, job_id: str, attempt: int | None, follow: bool) -> None:
    """An attempt's stdout and stderr (its last max_log_bytes)."""
    if follow and app.json_output:
        raise UsageError("--json prints one document; it does not go with --follow")
    sp = app.spool()
    from spool.cli import logview  # start-up: only `spool logs` reads attempt logs

    number = logview.attempt_to_show(sp, job_id, attempt, follow)
    if app.json_output:
        logview.print_log_json(sp, job_id, number)
    elif follow:
        logview.follow_log(sp, job_id, number, only_this=attempt is not None)
    else:
        logview.print_log(sp, job_id, number)


@command(epilog=example("spool --lease-seconds 10 config"))
@pass_app
def config(app: App) -> None:
    """The settings in force and where each came from."""
    rows = app.spool().settings.describe()
    if app.json_output:
        echo_json(
            {
                name: {"value": list(value) if isinstance(value, tuple) else value, "source": source}
                for name, value, source in rows
            }
        )
    else:
        render_table(["setting", "value", "from"], [[name, _show(value), source] for name, value, source in rows])


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)
