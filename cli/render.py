"""Rendering for people (tables, a status page) and for machines (one JSON document)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click


def echo_json(value: Any) -> None:
    import json  # start-up: only --json output loads json

    click.echo(json.dumps(value, indent=2, sort_keys=False))


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def render_status(view: dict[str, Any], parent_states: Mapping[str, str] | None = None) -> None:
    """The status page; ``parent_states``: each ``depends_on`` id's state, shown beside it."""
    parents = parent_states or {}
    lines = [
        ("id", view["id"]),
        ("key", view["key"]),
        ("task", view["task"]),
        ("queue", view.get("queue")),
        ("state", view["state"]),
        ("reason", view["reason"]),
        ("held by", f"{view['held_by']['limit']}: {view['held_by']['text']}" if view.get("held_by") else None),
        ("priority", view.get("priority") or None),
        ("not before", view.get("not_before")),
        (
            "depends on",
            ", ".join(f"{dep} ({parents[dep]})" if dep in parents else dep for dep in view.get("depends_on") or ())
            or None,
        ),
        ("waiting for", ", ".join(f"{dep} ({parents.get(dep, '?')})" for dep in view.get("waiting_for") or ()) or None),
        ("children", ", ".join(f"{c['id']} ({c['state']})" for c in view.get("children") or ()) or None),
        ("schedule", view.get("schedule")),
        ("attempt", view["attempt"]),
        ("tries", f"{view['tries']}/{view['max_tries']}"),
        (
            "lease",
            f"{view['lease']['worker']} (attempt {view['lease']['attempt']}, since {view['lease']['claimed_at']})"
            if view["lease"]
            else None,
        ),
        ("skipped because", view.get("skipped_because")),
        ("result", view["result"]),
        ("coordinator", view.get("coordinator")),
        ("warning", view.get("warning")),
    ]
    for name, value in lines:
        if value is not None:
            click.echo(f"{name + ':':<17}{value}")
    if view.get("attempts_dropped"):
        click.echo(f"({view['attempts_dropped']} earlier attempt records not kept)")
    for record in view["attempts"]:
        click.echo(
            f"attempt {record['attempt']}: {record['outcome'] or 'running'} on {record['worker']} "
            f"({record['started']} .. {record['ended'] or ''})"
        )
    if view["error"]:
        click.echo("error:")
        click.echo("  " + view["error"].rstrip().replace("\n", "\n  "))


def render_stats(view: dict[str, Any]) -> None:
    counts = view["counts"]
    states = ("pending", "waiting", "leased", "done", "dead")
    click.echo("  ".join(f"{state} {counts.get(state, 0)}" for state in states))
    if view["ready"] is not None:  # None: the reduced form, read from the files without the ledger
        click.echo(
            f"ready {view['ready']}  oldest ready {view['oldest_ready_seconds'] or 0:.1f}s  "
            f"completed last minute {view['completed_last_minute']}"
        )
    click.echo(f"coordinator: {view['coordinator']}")
    for queue in view.get("queues") or ():
        render_queue_line(queue)
    for task, ready in (view.get("unhandled_tasks") or {}).items():
        click.echo(f"warning: {ready} ready job(s) of task {task!r}, which no live worker handles")
    for worker in view["workers"]:
        if worker["pid"] is None:
            click.echo(f"worker {worker['name']} (alive)")
            continue
        if worker.get("remote"):
            state = "alive" if worker["alive"] else "gone"
            heard = f"last heard from {worker['seen']}"
            click.echo(f"worker {worker['name']} remote from {worker['host']} ({state}), {heard}")
            continue
        click.echo(
            f"worker {worker['name']} pid {worker['pid']} ({'alive' if worker['alive'] else 'gone'}), "
            f"last seen {worker['seen']}"
        )


def render_queue_line(queue: dict[str, Any]) -> None:
    """One queue of ``spool stats``: its counts, its limits, and what holds it now."""
    limits = [f"concurrency {queue['concurrency']}"] if queue["concurrency"] is not None else []
    limits += [f"rate {queue['rate']}"] if queue["rate"] else []
    limits += ["paused"] if queue["paused"] else []
    oldest = queue["oldest_ready_seconds"]
    line = (
        f"queue {queue['name']}: pending {queue['pending']}  leased {queue['leased']}  "
        f"claims last minute {queue['claims_last_minute']}  oldest ready {oldest or 0:.1f}s"
        f"  ({', '.join(limits) or 'no limits'})"
    )
    if queue["held_by"]:
        line += f"; held: {queue['held_by']['text']}"
    if queue["error"]:
        line += f"; queues/{queue['name']}.yaml is broken (the last valid limits hold): {queue['error']}"
    click.echo(line)
