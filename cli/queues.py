"""``spool queue``: list the queues, set a queue's limits, pause and resume it (queues/<name>.yaml)."""

from __future__ import annotations

from typing import Any

import click

from spool import queues
from spool.base.errors import LedgerError, UsageError
from spool.cli.app import App, example, SpoolCommand, pass_app
from spool.cli.render import echo_json, render_table
from spool.views import queue_views, queue_views_from_files


class QueueGroup(SpoolCommand, click.Group):
    """The group takes ``--spool`` and ``--json`` after its name too: ``spool queue --json list``."""


@click.group(name="queue", cls=QueueGroup, epilog=example("spool queue set images --concurrency 2 --rate 10/s"))
def queue() -> None:
    """Queues and their limits: concurrency, rate and pause, in queues/<name>.yaml."""


@queue.command(name="list", cls=SpoolCommand, epilog=example("spool queue list"))
@pass_app
def list_command(app: App) -> None:
    """Each queue: its limits, pending, leased, claims in the last minute, and what holds it."""
    sp = app.spool()
    try:
        views = queue_views(sp)
    except LedgerError as err:
        click.echo(f"spool: {err}; showing the queue files alone, without counts", err=True)
        views = queue_views_from_files(sp)
    if app.json_output:
        echo_json(views)
        return
    render_table(
        ["queue", "concurrency", "rate", "paused", "pending", "leased", "claims/min", "oldest ready", "held by"],
        [
            [
                v["name"],
                v["concurrency"] if v["concurrency"] is not None else "-",
                v["rate"] or "-",
                "yes" if v["paused"] else "no",
                _count_text(v["pending"]),
                _count_text(v["leased"]),
                _count_text(v["claims_last_minute"]),
                f"{v['oldest_ready_seconds']:.1f}s" if v["oldest_ready_seconds"] is not None else "",
                v["held_by"]["limit"] if v["held_by"] else "",
            ]
            for v in views
        ],
    )
    for v in views:
        if v["error"]:
            click.echo(f"{v['name']}: BROKEN, the last valid limits above stay in force: {v['error']}")
        if v["held_by"]:
            click.echo(f"{v['name']}: {v['held_by']['text']}")


@queue.command(name="set", cls=SpoolCommand, epilog=example("spool queue set images --concurrency 2 --rate 100/m"))
@click.argument("name")
@click.option("--concurrency", metavar="N", help="At most N jobs of the queue leased at once, over every worker.")
@click.option("--rate", metavar="N/PERIOD", help="At most N claims in any sliding PERIOD (s, m or h): 5/s, 100/m.")
@click.option("--clear", is_flag=True, help="Drop the concurrency and rate first (the pause stays as it is).")
@pass_app
def set_command(app: App, name: str, concurrency: str | None, rate: str | None, clear: bool) -> None:
    """Write queues/NAME.yaml (atomically) with these limits; the next claim obeys them."""
    if concurrency is None and rate is None and not clear:
        raise UsageError("queue set needs --concurrency N, --rate N/PERIOD or --clear")
    limits = queues.set_limits(app.spool(), name, concurrency=_count(concurrency), rate=rate, clear=clear)
    shown = [f"concurrency {limits.concurrency}" if limits.concurrency is not None else "no concurrency limit"]
    shown.append(f"rate {queues.rate_text(limits)}" if limits.rate_count is not None else "no rate limit")
    shown += ["paused"] if limits.paused else []
    _show_one(app, name, f"queue {name}: {', '.join(shown)}")


@queue.command(name="pause", cls=SpoolCommand, epilog=example("spool queue pause images"))
@click.argument("name")
@pass_app
def pause(app: App, name: str) -> None:
    """Claim nothing from NAME until it is resumed (its jobs stay pending; no try is spent)."""
    queues.set_limits(app.spool(), name, paused=True)
    _show_one(app, name, f"queue {name} paused")


@queue.command(name="resume", cls=SpoolCommand, epilog=example("spool queue resume images"))
@click.argument("name")
@pass_app
def resume(app: App, name: str) -> None:
    """Claim from NAME again (its other limits still hold)."""
    queues.set_limits(app.spool(), name, paused=False)
    _show_one(app, name, f"queue {name} resumed")


def _count(text: str | None) -> int | None:
    """--concurrency as a number; the range is spool.queues' to check (one message for both)."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--concurrency: expected a positive integer, got {text!r}") from None


def _count_text(value: int | None) -> str:
    return "?" if value is None else str(value)


def _show_one(app: App, name: str, line: str) -> None:
    if app.json_output:
        view: dict[str, Any] = next((v for v in queue_views(app.spool(), sync=False) if v["name"] == name), {})
        echo_json(view)
    else:
        click.echo(line)
