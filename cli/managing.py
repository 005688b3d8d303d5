"""Commands a person runs to set up, mend and tidy a spool: init, requeue, cancel, fsck, purge,
and crash-points (the names the crash tests use)."""

from __future__ import annotations

import os
import sys

import click

from spool import admin

from spool.base import crash
from spool.cli.app import App, example, command, flag_duration, pass_app
from spool.cli.render import echo_json
from spool.base.errors import UsageError
from spool.fsck import fsck as run_fsck
from spool.disk import MARKER, State
from spool.disk import init_spool
from spool.settings import parse_duration
from spool.spool import resolve_root


@command(epilog=example("spool --spool /srv/spool init --group-shared"))
@click.option("--group-shared", is_flag=True, help="Make the spool group-readable and writable (0770).")
@pass_app
def init(app: App, group_shared: bool) -> None:
    """Create a spool's layout."""
    root = resolve_root(app.spool_dir, os.environ)
    existed = (root / MARKER).exists()
    root = init_spool(root, group_shared=group_shared)
    if app.json_output:
        echo_json({"spool": str(root), "created": not existed})
    else:
        click.echo(f"initialised spool at {root}")


@command(
    epilog=example(
        "spool requeue 01JD8Z5X4Q7V3K2M9N6P0R1S2T",
        "spool requeue 01JD8Z5X4Q7V3K2M9N6P0R1S2T --with-parents  # and the dead parents it waits on",
        "spool requeue --all-dead --task resize",
    )
)
@click.argument("job_id", required=False)
@click.option("--all-dead", is_flag=True, help="Every dead job (that can run).")
@click.option("--task", help="With --all-dead: only this task.")
@click.option(
    "--with-parents",
    is_flag=True,
    help="With ID: requeue the dead parents (and theirs) it waits on too, so the whole chain runs again.",
)
@click.option(
    "--timeout",
    "timeout_text",
    metavar="S",
    help="With ID: wait at most this long for the job's lock (exit 75, nothing changed).",
)
@pass_app
def requeue(
    app: App, job_id: str | None, all_dead: bool, task: str | None, with_parents: bool, timeout_text: str | None
) -> None:
    """Dead -> pending (or waiting) with a fresh set of tries; skipped children re-armed."""
    crash.arm("admin", os.environ)
    sp = app.spool()
    if all_dead == bool(job_id):
        raise UsageError("requeue takes one ID or --all-dead")
    if with_parents and not job_id:
        raise UsageError("--with-parents goes with one ID")
    timeout_seconds = flag_duration("--timeout", timeout_text)
    if not job_id:  # --all-dead: the check above leaves exactly one of the two
        ids = admin.requeue_all_dead(sp, task)
    elif with_parents:
        ids = admin.requeue_with_parents(sp, job_id, timeout_seconds=timeout_seconds, on_wait=_say_waiting)
    else:
        ids = [job_id] if sp.requeue(job_id, timeout_seconds=timeout_seconds, on_wait=_say_waiting) else []
    if app.json_output:
        echo_json({"requeued": ids})
    else:
        for requeued_id in ids:
            click.echo(f"{requeued_id} requeued")


def _say_waiting(what: str) -> None:
    """A person waiting on a job's lock hears why (a stopped process may hold it for ever)."""
    click.echo(f"spool: {what}", err=True)


@command(epilog=example("spool cancel 01JD8Z5X4Q7V3K2M9N6P0R1S2T --timeout 10s"))
@click.argument("job_id")
@click.option(
    "--timeout",
    "timeout_text",
    metavar="S",
    help="Wait at most this long for the job's lock (exit 75, nothing changed).",
)
@pass_app
def cancel(app: App, job_id: str, timeout_text: str | None) -> None:
    """Pending/waiting -> dead (cancelled); a leased job's worker kills it at its next heartbeat."""
    crash.arm("admin", os.environ)
    timeout_seconds = flag_duration("--timeout", timeout_text)
    outcome = app.spool().cancel(job_id, timeout_seconds=timeout_seconds, on_wait=_say_waiting)
    if app.json_output:
        echo_json({"id": job_id, "cancel": outcome})
    else:
        click.echo(
            f"{job_id} cancelled"
            if outcome == "cancelled"
            else f"{job_id} is running; its worker will kill it at its next heartbeat"
        )


@command(epilog=example("spool fsck --repair"))
@click.option("--repair", is_flag=True, help="Fix what can be fixed and rebuild the ledger from the files.")
@pass_app
def fsck(app: App, repair: bool) -> None:
    """Check every promise on disk; exit 0 when all hold, 1 otherwise."""
    from spool.schedule import ignored  # start-up: only fsck and `schedule` read schedules/

    sp = app.spool()
    report = run_fsck(sp, repair=repair)
    notes = list(ignored(sp).values())  # breaks no promise: a file that is no schedule
    if app.json_output:
        echo_json(
            {
                "ok": report.ok,
                "jobs": report.jobs,
                "violations": report.violations,
                "in_progress": report.in_progress,
                "garbage": report.garbage,
                "repaired": report.repaired,
                "notes": notes,
            }
        )
    else:
        for line in report.repaired:
            click.echo(f"repaired: {line}")
        for line in report.in_progress:
            click.echo(f"in progress: {line}")
        for line in report.garbage:
            click.echo(f"garbage: {line}")
        for line in notes:
            click.echo(f"note: {line}")
        for line in report.violations:
            click.echo(f"VIOLATION: {line}")
        click.echo(
            f"{report.jobs} jobs checked: "
            + ("every promise holds" if report.ok else f"{len(report.violations)} violation(s)")
        )
    if not report.ok:
        sys.exit(1)


@command(epilog=example("spool purge --older-than 7d --state done"))
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="Like 7d, 12h, 30m.")
@click.option("--state", "state_names", default="done,dead", show_default=True, help="Comma-separated.")
@pass_app
def purge(app: App, older_than: str, state_names: str) -> None:
    """Remove old finished jobs with their results, logs and keys."""
    crash.arm("admin", os.environ)
    try:
        states = [State(name.strip()) for name in state_names.split(",") if name.strip()]
    except ValueError:
        raise UsageError(f"--state {state_names!r}: expected done and/or dead") from None
    purged = admin.purge(app.spool(), parse_duration(older_than), states, on_wait=_say_waiting)
    echo_json({"purged": purged}) if app.json_output else click.echo(f"purged {len(purged)} job(s)")


# Not a spool command: it reads no spool, so it takes no --spool, only its own bare --json.
@click.command(name="crash-points", epilog=example("spool crash-points | grep worker:"))
@click.option("--json", "json_output", is_flag=True, default=False, help="Print the names as one JSON list.")
@pass_app
def crash_points(app: App, json_output: bool) -> None:
    """Every SPOOL_CRASH_AT name."""
    points = crash.all_points()
    echo_json(points) if app.json_output or json_output else click.echo("\n".join(points))
