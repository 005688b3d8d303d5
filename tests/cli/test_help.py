"""Every command teaches itself: its ``--help`` shows an example and every option says what it does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import click
import pytest

from spool.cli.main import COMMANDS, cli

Run = Callable[..., Any]


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


ALL = sorted(_commands(cli))


def test_the_walk_finds_every_command_and_the_subcommands() -> None:
    names = {" ".join(path) for path, _command in ALL}
    assert set(COMMANDS) <= names
    assert {"schedule add", "queue set", "token add", "token list"} <= names


@pytest.mark.parametrize("path", [path for path, _command in ALL], ids=" ".join)
def test_every_help_has_an_example_and_every_option_has_help(spool_run: Run, path: tuple[str, ...]) -> None:
    ran = spool_run(*path, "--help")
    assert ran.code == 0, ran
    assert "Example" in ran.out, f"spool {' '.join(path)} --help shows no example:\n{ran.out}"
    command = dict(ALL)[path]
    bare = [param.name for param in command.params if isinstance(param, click.Option) and not param.help]
    assert not bare, f"spool {' '.join(path)}: options without help: {bare}"


def test_the_group_help_has_an_example_too_and_its_options_help(spool_run: Run) -> None:
    ran = spool_run("--help")
    assert ran.code == 0 and "Example" in ran.out, ran
    assert not [param.name for param in cli.params if isinstance(param, click.Option) and not param.help]
