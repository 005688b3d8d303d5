"""The ``spool`` command: the group, its shared options, and the one place errors become exit codes.

Every command takes ``--spool DIR`` (or $SPOOL_DIR) and every command that prints data takes
``--json``, before or after the subcommand. Each setting also has a flag on the group
(``spool --lease-seconds 10 coordinator``), which beats the environment and config.yaml.
Errors are one line on stderr with the exit code of their class (spool.errors), never a
traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from spool import crash
from spool.errors import SpoolError, UsageError
from spool.settings import environment_warnings, setting_names
from spool.spool import Spool

F = TypeVar("F", bound=Callable[..., Any])


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


def common(fn: F) -> F:
    """``--spool`` and ``--json`` after the subcommand too."""
    fn = click.option("--json", "json_output", is_flag=True, default=False, help="Print one JSON document.")(fn)
    fn = click.option("--spool", "spool_dir", metavar="DIR", default=None, help="The spool folder.")(fn)
    return fn


def merge_common(app: App, spool_dir: str | None, json_output: bool) -> App:
    if spool_dir:
        app.spool_dir = spool_dir
        app._spool = None
    app.json_output = app.json_output or json_output
    return app


def _setting_options(fn: F) -> F:
    for name in reversed(setting_names()):
        if name == "group_shared":
            continue
        fn = click.option(f"--{name.replace('_', '-')}", name, default=None, metavar="VALUE",
                          help=f"Setting {name} (beats SPOOL_{name.upper()} and config.yaml).")(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--spool", "spool_dir", metavar="DIR", envvar="SPOOL_DIR", default=None,
              help="The spool folder (default $SPOOL_DIR, else ./spool).")
@click.option("--json", "json_output", is_flag=True, default=False, help="Print one JSON document.")
@_setting_options
@click.version_option(package_name="spool-queue")
@click.pass_context
def cli(ctx: click.Context, spool_dir: str | None, json_output: bool, **flags: object) -> None:
    """spool: a crash-safe job runner whose queue is a directory."""
    os.umask(0o077)
    warn_about_environment(os.environ)
    ctx.obj = App(spool_dir=spool_dir, json_output=json_output,
                  flags={name: value for name, value in flags.items() if value is not None})
    ctx.call_on_close(ctx.obj.close)


def warn_about_environment(environ: Mapping[str, str]) -> None:
    """Say once, on stderr, what in the environment looks like a typo (spool/ returns the words)."""
    if environ.get("SPOOL_PARENT_PID"):
        return  # a supervised child: the supervisor's own process has said it already
    lines = environment_warnings(environ)
    target = environ.get("SPOOL_CRASH_AT")
    if target:
        unknown = crash.unknown_target(target)
        lines += [unknown] if unknown else []
    for line in lines:
        click.echo(f"spool: warning: {line}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the group, turn every error into one line and an exit code.

    With ``--json`` anywhere before a ``--``, the line is one JSON object, ``{"error", "exit"}``.
    """
    from spool.cli import commands, processes  # noqa: F401  (registers the commands)

    args = sys.argv[1:] if argv is None else argv
    words = args[:args.index("--")] if "--" in args else args
    fail = functools.partial(_fail_with, as_json="--json" in words)
    try:
        code = cli.main(args=args, prog_name="spool", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as err:
        click.echo(err.ctx.get_help() if err.ctx else str(err))
        code = 2
    except click.UsageError as err:
        fail(f"{err.format_message()}" + (f" (see `{err.ctx.command_path} --help`)" if err.ctx else ""), 2)
    except click.ClickException as err:
        fail(err.format_message(), err.exit_code)
    except click.exceptions.Exit as err:
        code = err.exit_code
    except click.Abort:
        fail("aborted", 130)
    except UsageError as err:
        fail(str(err), err.exit_code)
    except SpoolError as err:
        fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(1)
    except OSError as err:
        fail(f"{err.filename + ': ' if err.filename else ''}{err.strerror or err}", 1)
    except sqlite3.Error as err:  # the ledger failed (a full or failing disk): one line, never a traceback
        fail(f"ledger: {err}", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _fail_with(message: str, code: int, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"error": message, "exit": code}), err=True)
    else:
        click.echo(f"spool: {message}", err=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
