"""``spool schedule``: add, list, enable, disable, rm and run the files in schedules/."""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from spool.base import crash
from spool.schedule import folder as scheduling
from spool.cli.app import App, example, SpoolCommand, flag_duration, pass_app
from spool.cli.render import echo_json, render_table
from spool.cli.submitting import _parse_args as parse_args
from spool.base.errors import UsageError
from spool.base.timetext import parse_time
from spool.schedule import CATCHUPS, OVERLAPS, InvalidSchedule


class ScheduleGroup(SpoolCommand, click.Group):
    """The group takes ``--spool`` and ``--json`` after its name too: ``spool schedule --json list``."""


@click.group(
    name="schedule",
    cls=ScheduleGroup,
    epilog=example('spool schedule add nightly --cron "0 3 * * *" --tz Europe/Paris report'),
)
def schedule() -> None:
    """Recurring jobs: the cron expressions and intervals in schedules/."""


@schedule.command(
    name="add",
    cls=SpoolCommand,
    epilog=example(
        'spool schedule add nightly --cron "0 3 * * *" --tz Europe/Paris report -a days:=7',
        "spool schedule add tick --every 5m wordcount -a path=/data/log.txt",
    ),
)
@click.argument("name")
@click.argument("task")
@click.option("--cron", metavar="EXPR", help="5 cron fields (or 6, seconds last).")
@click.option("--tz", metavar="ZONE", help="With --cron: an IANA zone (default UTC).")
@click.option("--every", metavar="DURATION", help="An interval: 30s, 5m, 1h.")
@click.option("-a", "arg_pairs", multiple=True, metavar="K=V|K:=JSON", help="An argument (string, or JSON with :=).")
@click.option("--priority", type=int, help="Higher runs first (default 0).")
@click.option("--max-tries", type=int, help="Tries before a firing's job is dead (default max_tries).")
@click.option("--timeout", "timeout_text", metavar="S", help="Seconds one attempt may run.")
@click.option("--queue", metavar="Q", help="The firings' queue (default `default`).")
@click.option("--catchup", type=click.Choice(CATCHUPS), help="After downtime: none, one (default) or all.")
@click.option("--overlap", type=click.Choice(OVERLAPS), help="skip: no firing while the last one runs.")
@pass_app
def add(
    app: App,
    name: str,
    task: str,
    cron: str | None,
    tz: str | None,
    every: str | None,
    arg_pairs: tuple[str, ...],
    priority: int | None,
    max_tries: int | None,
    timeout_text: str | None,
    queue: str | None,
    catchup: str | None,
    overlap: str | None,
) -> None:
    """Write schedules/NAME.yaml (atomically): TASK every DURATION or on a cron expression."""
    if (cron is None) == (every is None):
        raise UsageError("schedule add takes one of --cron EXPR and --every DURATION")
    if tz is not None and cron is None:
        raise UsageError("--tz goes with --cron")
    sp = app.spool()
    fields = scheduling.schedule_fields(
        cron=cron,
        tz=tz,
        every=every,
        task=task,
        args=parse_args(arg_pairs, None),
        priority=priority,
        max_tries=max_tries,
        timeout=flag_duration("--timeout", timeout_text),
        queue=queue,
    )
    fields.update({k: v for k, v in (("catchup", catchup), ("overlap", overlap)) if v is not None})
    scheduling.add(sp, name, fields)
    _show_one(app, name, f"schedule {name} added")


@schedule.command(name="list", cls=SpoolCommand, epilog=example("spool schedule list"))
@pass_app
def list_command(app: App) -> None:
    """Each schedule: its expression, next fire time, last slot fired (job, state), or its error."""
    sp = app.spool()
    now = time.time()
    views = [_with_local_time(scheduling.view(sp, entry, now), entry) for entry in scheduling.entries(sp).values()]
    for line in scheduling.ignored(sp).values():  # not in the JSON list: its rows are schedules
        click.echo(f"note: {line}", err=True)
    if app.json_output:
        echo_json(views)
        return
    render_table(
        ["name", "schedule", "task", "enabled", "next", "next local", "last slot", "last job", "state"],
        [
            [
                v["name"],
                v["expression"] or "BROKEN",
                v["task"],
                _yes(v["enabled"]),
                v["next"],
                _local_text(v),
                v["last_slot"],
                v["last_job"],
                v["last_state"],
            ]
            for v in views
        ],
    )
    for v in views:
        if v["error"]:
            click.echo(f"{v['name']}: {v['error']}")


@schedule.command(name="enable", cls=SpoolCommand, epilog=example("spool schedule enable nightly"))
@click.argument("name")
@pass_app
def enable(app: App, name: str) -> None:
    """Fire NAME again from its next slot (no backlog)."""
    scheduling.set_enabled(app.spool(), name, True)
    _show_one(app, name, f"schedule {name} enabled")


@schedule.command(name="disable", cls=SpoolCommand, epilog=example("spool schedule disable nightly"))
@click.argument("name")
@pass_app
def disable(app: App, name: str) -> None:
    """Stop firing NAME (its file stays)."""
    scheduling.set_enabled(app.spool(), name, False)
    _show_one(app, name, f"schedule {name} disabled")


@schedule.command(name="rm", cls=SpoolCommand, epilog=example("spool schedule rm nightly"))
@click.argument("name")
@pass_app
def rm(app: App, name: str) -> None:
    """Remove schedules/NAME.yaml (the jobs it fired stay)."""
    scheduling.remove(app.spool(), name)
    if app.json_output:
        echo_json({"removed": name})
    else:
        click.echo(f"schedule {name} removed")


@schedule.command(name="run", cls=SpoolCommand, epilog=example("spool schedule run nightly"))
@click.argument("name")
@pass_app
def run(app: App, name: str) -> None:
    """Submit NAME's job once now, keyed to now; prints its id."""
    crash.arm("submit", os.environ)
    sp = app.spool()
    entry = scheduling.entry_of(sp, name)
    if entry.schedule is None:
        raise InvalidSchedule(entry.error or f"schedule {name} is broken")
    submitted = scheduling.run_now(sp, entry.schedule)
    if app.json_output:
        echo_json({"id": submitted.id, "created": submitted.created, "schedule": name})
    else:
        click.echo(submitted.id)


def _show_one(app: App, name: str, line: str) -> None:
    sp = app.spool()
    if app.json_output:
        entry = scheduling.entry_of(sp, name)
        echo_json(_with_local_time(scheduling.view(sp, entry, time.time()), entry))
    else:
        click.echo(line)


def _with_local_time(view: dict[str, Any], entry: scheduling.Entry) -> dict[str, Any]:
    """The view with the schedule's ``tz`` and ``next_local``: its next slot on the zone's wall
    clock (RFC 3339 with the offset), beside ``next`` in UTC; None for a schedule in UTC."""
    zone = entry.schedule.tz if entry.schedule is not None else None
    view["tz"] = zone
    view["next_local"] = None
    if zone and zone != "UTC" and view["next"]:
        moment = parse_time(view["next"], "next").astimezone(ZoneInfo(zone))
        view["next_local"] = moment.isoformat(timespec="seconds")
    return view


def _local_text(view: dict[str, Any]) -> str:
    """``2026-12-06 03:00:00 CET`` for a table (empty for a schedule in UTC)."""
    if not view["next_local"]:
        return ""
    return datetime.fromisoformat(view["next_local"]).astimezone(ZoneInfo(view["tz"])).strftime("%Y-%m-%d %H:%M:%S %Z")


def _yes(value: Any) -> str:
    return "" if value is None else ("yes" if value else "no")
