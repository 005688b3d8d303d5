"""The ``spool`` command: the group, the commands it holds, and the one place errors become exit codes.

Every command that works on a spool takes ``--spool DIR`` (or $SPOOL_DIR) and ``--json``, before
or after the subcommand (``spool.cli.app``). Each setting also has a flag on the group
(``spool --lease-seconds 10 coordinator``), which beats the environment and config.yaml.
Errors are one line on stderr with the exit code of their class (spool.base.errors), never a
traceback.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

import click

from spool.base import crash
from spool.cli.app import App, example
from spool.base.errors import SpoolError, UsageError
from spool.settings import environment_warnings, setting_names

F = TypeVar("F", bound=Callable[..., Any])


def _setting_options(fn: F) -> F:
    for name in reversed(setting_names()):
        if name == "group_shared":
            continue
        fn = click.option(
            f"--{name.replace('_', '-')}",
            name,
            default=None,
            metavar="VALUE",
            help=f"Setting {name} (beats SPOOL_{name.upper()} and config.yaml).",
        )(fn)
    return fn


# Every command the group holds, named here rather than registered by importing its module: a
# command's module (and all it imports: the ledger, YAML, the runner) loads when that command
# runs, or when the group's help lists it, never for another command (`spool submit` starts fast).
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("managing", "init"),
    "submit": ("submitting", "submit"),
    "status": ("inspecting", "status"),
    "result": ("inspecting", "result"),
    "wait": ("inspecting", "wait"),
    "ls": ("inspecting", "ls_command"),
    "stats": ("inspecting", "stats"),
    "requeue": ("managing", "requeue"),
    "cancel": ("managing", "cancel"),
    "schedule": ("scheduling", "schedule"),
    "queue": ("queues", "queue"),
    "fsck": ("managing", "fsck"),
    "purge": ("managing", "purge"),
    "logs": ("inspecting", "logs"),
    "config": ("inspecting", "config"),
    "crash-points": ("managing", "crash_points"),
    "coordinator": ("processes", "coordinator"),
    "worker": ("processes", "worker"),
    "run": ("processes", "run"),
    "demo": ("processes", "demo"),
    "serve": ("serving", "serve"),
    "token": ("serving", "token"),
    "dispatch": ("dispatching", "dispatch"),
    "run-one": ("dispatching", "run_one"),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands by name, each imported from its module on first use."""

    def __init__(self, where: Mapping[str, tuple[str, str]]) -> None:
        self._where = dict(where)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, attr = self._where[name]  # KeyError: no such command
            loaded = getattr(importlib.import_module(f"spool.cli.{module}"), attr)
            assert isinstance(loaded, click.Command) and loaded.name == name, (name, loaded)
            self._loaded[name] = loaded
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._where.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._where.pop(name, None)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._where, *self._loaded]))

    def __len__(self) -> int:
        return len(set(self._where) | set(self._loaded))


@click.group(
    commands=LazyCommands(COMMANDS),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=example(
        "spool init",
        "id=$(spool submit wordcount -a path=book.txt --key book)",
        "spool run --workers 4 --import myapp.tasks &",
        'spool wait "$id" && spool result "$id"',
    ),
)
@click.option(
    "--spool",
    "spool_dir",
    metavar="DIR",
    envvar="SPOOL_DIR",
    default=None,
    help="The spool folder (default $SPOOL_DIR, else ./spool).",
)
@click.option("--json", "json_output", is_flag=True, default=False, help="Print one JSON document.")
@_setting_options
@click.version_option(package_name="spool-queue")
@click.pass_context
def cli(ctx: click.Context, spool_dir: str | None, json_output: bool, **flags: object) -> None:
    """spool: a crash-safe job runner whose queue is a directory."""
    os.umask(0o077)
    warn_about_environment(os.environ)
    ctx.obj = App(
        spool_dir=spool_dir,
        json_output=json_output,
        flags={name: value for name, value in flags.items() if value is not None},
    )
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
    _freeze_start_up_objects()
    args = sys.argv[1:] if argv is None else argv
    words = args[: args.index("--")] if "--" in args else args
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


@functools.cache
def _freeze_start_up_objects() -> None:
    """Leave what the imports made (classes, functions, tables: ~17,000 objects that live as long
    as the process) out of every later garbage collection, the one at exit included: ~5 ms of a
    ~70 ms ``spool submit``. Once a process: a caller that runs ``main``
    again (the tests) does not freeze the garbage its earlier calls left."""
    gc.freeze()


def _fail_with(message: str, code: int, *, as_json: bool) -> None:
    if as_json:
        import json  # start-up: only a failing command with --json loads json

        click.echo(json.dumps({"error": message, "exit": code}), err=True)
    else:
        click.echo(f"spool: {message}", err=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
