"""What every command shares: the ``App`` the group builds, and the one way ``--spool``/``--json``
reach a command.

The group takes ``--spool DIR`` (or $SPOOL_DIR) and ``--json`` before the subcommand; a command
made with ``@command(...)`` takes both after it too, and they are merged into the ``App`` before
its body runs, so a body only parses its own options, calls spool/ or runner/, and renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from spool.base.errors import UsageError
from spool.settings import parse_duration
from spool.spool import Spool


@dataclass
class App:
    """What the group callback learned, handed to every command through ``ctx.obj``."""

    spool_dir: str | None
    json_output: bool
    flags: dict[str, object] = field(default_factory=dict)
    _spool: Spool | None = None

    def spool(self) -> Spool:
        if self._spool is None:
            self._spool = Spool(self.spool_dir, flags=self.flags)
        return self._spool

    def merge(self, spool_dir: str | None, json_output: bool) -> None:
        """A command's own ``--spool``/``--json`` (given after it) over the group's."""
        if spool_dir:
            self.spool_dir = spool_dir
            self._spool = None
        self.json_output = self.json_output or json_output

    def close(self) -> None:
        """At the end of a command: the ledger's last user empties its WAL as it closes."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def flag_argv(self) -> list[str]:
        """The group options again, for processes a command starts (``spool run``, the demo)."""
        argv = ["--spool", str(self.spool().root)]
        for name, value in self.flags.items():
            if value is not None:
                argv += [f"--{name.replace('_', '-')}", str(value)]
        return argv


pass_app = click.make_pass_decorator(App)


class SpoolCommand(click.Command):
    """A command that also takes ``--spool DIR`` and ``--json`` after its name (after its own
    options in its help) and merges them into the ``App`` before its callback runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params += [
            click.Option(["--spool", "spool_dir"], metavar="DIR", default=None, help="The spool folder."),
            click.Option(["--json", "json_output"], is_flag=True, default=False, help="Print one JSON document."),
        ]

    def invoke(self, ctx: click.Context) -> Any:
        spool_dir, json_output = ctx.params.pop("spool_dir"), ctx.params.pop("json_output")
        app = ctx.find_object(App)
        if app is not None:
            app.merge(spool_dir, json_output)
        return super().invoke(ctx)


def command(name: str | None = None, **attrs: Any) -> Callable[[Callable[..., Any]], click.Command]:
    """``click.command`` for a command that works on a spool: ``--spool`` and ``--json`` included."""
    return click.command(name, cls=SpoolCommand, **attrs)


def example(*lines: str) -> str:
    """A command's epilog: ``Example:`` and its command lines, kept as written (click's ``\\b``)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)


def flag_duration(flag: str, text: str | None) -> float | None:
    """A duration option's seconds (None when not given); a bad one names its flag."""
    if not text:
        return None
    try:
        return parse_duration(text)
    except UsageError as err:
        raise UsageError(f"{flag}: {err}") from None
