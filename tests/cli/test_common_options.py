"""``--spool`` and ``--json`` reach every command the same way: on the group before the command,
or after it (``spool.cli.app.SpoolCommand``), and $SPOOL_DIR when neither names a spool."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from spool.cli.app import SpoolCommand
from spool.cli.main import COMMANDS, cli
from spool.spool import Spool

# Commands that read no spool: crash-points keeps its own bare --json, demo makes its own spool,
# dispatch and run-one work over the API.
NOT_SPOOL_COMMANDS = {"crash-points", "demo", "dispatch", "run-one"}


def test_the_group_holds_exactly_the_listed_commands() -> None:
    # Each is imported from its module when first used (spool.cli.main.LazyCommands): each
    # listed name must load the command of that name.
    assert sorted(cli.commands) == sorted(COMMANDS)
    assert {name: command.name for name, command in cli.commands.items()} == {name: name for name in COMMANDS}


def test_every_spool_command_takes_spool_and_json_after_its_name() -> None:
    for name, command in cli.commands.items():
        if name in NOT_SPOOL_COMMANDS:
            assert not isinstance(command, SpoolCommand), name
            continue
        assert isinstance(command, SpoolCommand), name
        options = {param.name: param for param in command.params if isinstance(param, click.Option)}
        assert options["spool_dir"].opts == ["--spool"] and options["json_output"].opts == ["--json"], name


@pytest.mark.parametrize(
    "args",
    [
        ("--json", "--spool", "{root}", "ls"),
        ("--spool", "{root}", "ls", "--json"),
        ("ls", "--spool", "{root}", "--json"),
        ("--json", "ls", "--spool", "{root}"),
    ],
)
def test_spool_and_json_work_before_or_after_the_command(
    tmp_path: Path, spool_run: Callable[..., Any], args: tuple[str, ...]
) -> None:
    with Spool.init(tmp_path / "sp", environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    ran = spool_run(*(arg.format(root=tmp_path / "sp") for arg in args))
    assert ran.code == 0, ran.err
    assert [view["id"] for view in json.loads(ran.out)] == [job_id]


def test_spool_after_the_command_beats_the_group_and_the_environment(
    tmp_path: Path, spool_run: Callable[..., Any]
) -> None:
    for name in ("a", "b"):
        Spool.init(tmp_path / name, environ={}).close()
    with Spool(tmp_path / "b", environ={}) as sp:
        job_id = sp.submit("echo", {"n": 1})
    ran = spool_run(
        "--spool",
        str(tmp_path / "a"),
        "ls",
        "--spool",
        str(tmp_path / "b"),
        "--json",
        env={"SPOOL_DIR": str(tmp_path / "a")},
    )
    assert [view["id"] for view in json.loads(ran.out)] == [job_id]
    from_env = spool_run("ls", "--json", env={"SPOOL_DIR": str(tmp_path / "b")})
    assert [view["id"] for view in json.loads(from_env.out)] == [job_id]
