"""``spool dispatch`` (hand ready jobs to an engine) and ``spool run-one`` (what each engine job runs)."""

from __future__ import annotations

import os
import sys

import click

from spool.base import crash

from spool.base.errors import UsageError
from spool.cli.app import App, example, flag_duration, pass_app
from spool.cli.processes import _daemonise_stdio, _import_option, _queues_option, _remote_token
from spool.runner.logs import setup_logging
from spool.settings import load_settings

_server = click.option("--server", metavar="URL", required=True, help="The spool's API (https://host:port).")
_cacert = click.option("--cacert", metavar="FILE", help="Trust this CA (a self-signed server's cert.pem).")
_token_file = click.option(
    "--token-file", metavar="FILE", type=click.Path(dir_okay=False), help="Read the token from FILE."
)


def _job_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from spool.disk import is_valid_id  # start-up: the flag's check only

    if value is not None and not is_valid_id(value):
        raise click.BadParameter(f"{value!r} is not a job id")
    return value


@click.command(
    "run-one",
    epilog=example(
        "spool run-one --server https://HOST:8443 --token-file dispatch.token --cacert cert.pem \\",
        "    --runner r1 --job 01JD8Z5X4Q7V3K2M9N6P0R1S2T",
    ),
)
@_server
@_token_file
@_cacert
@click.option("--runner", metavar="NAME", required=True, help="This runner's name (its leases: <token>/<NAME>).")
@click.option("--job", "job_id", metavar="ID", callback=_job_id, help="Claim this job or none.")
@_import_option
@pass_app
def run_one(
    app: App,
    server: str,
    token_file: str | None,
    cacert: str | None,
    runner: str,
    job_id: str | None,
    import_modules: tuple[str, ...],
) -> None:
    """Claim one job over the API, run its attempt, report it, exit (an engine job of `spool dispatch`)."""
    # start-up: the remote worker's modules (ssl, http.client) only the remote commands need
    from spool.runner.remote.client import ApiClient
    from spool.runner.remote.worker import run_remote_worker  # start-up: as above
    from spool.workers import WORKER_NAME  # start-up: as above

    if not WORKER_NAME.fullmatch(runner):
        raise UsageError(f"--runner {runner!r}: 1-64 letters, digits, '_', '-' or '.'")
    token, token_from = _remote_token(None, token_file)
    settings = load_settings(None, os.environ, app.flags)
    client = ApiClient(server, token, cacert, token_from=token_from)
    _daemonise_stdio()
    setup_logging(settings.log_level, settings.log_format, "run-one")
    sys.path.insert(0, os.getcwd())  # so `--import examples.tasks` works from a checkout
    sys.exit(
        run_remote_worker(
            client,
            settings,
            import_modules=import_modules,
            sys_path=[os.getcwd()],
            once=True,
            runner=runner,
            job=job_id,
        )
    )


def _task_names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    from spool.registry import is_valid_task_name  # start-up: the flag's check only

    if value is None:
        return None
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    for name in names:
        if not is_valid_task_name(name):
            raise click.BadParameter(f"{name!r} is not a task name")
    if not names:
        raise click.BadParameter("expected task names, comma-separated")
    return names


@click.command(
    epilog=example(
        "spool dispatch --server https://HOST:8443 --token-file dispatch.token --cacert cert.pem \\",
        "    --engine local --max-inflight 8 --import myapp.tasks",
    )
)
@_server
@click.option("--token", metavar="TOKEN", help="A dispatch token. Visible in ps: prefer --token-file.")
@_token_file
@_cacert
@click.option(
    "--engine", required=True, metavar="NAME", help="Where engine jobs run: local, dask, slurm or kubernetes."
)
@click.option("--engine-opt", "engine_opts", multiple=True, metavar="K=V", help="An engine's option (repeatable).")
@click.option("--tasks", callback=_task_names, metavar="T,...", help="Dispatch only these tasks (default: imported).")
@_queues_option
@click.option(
    "--max-inflight",
    type=click.IntRange(1, 4096),
    default=4,
    show_default=True,
    help="At most this many engine jobs started and not yet ended.",
)
@click.option(
    "--dispatch-timeout", metavar="D", default="300", show_default=True, help="Cancel engine jobs not started by then."
)
@_import_option
@pass_app
def dispatch(
    app: App,
    server: str,
    token: str | None,
    token_file: str | None,
    cacert: str | None,
    engine: str,
    engine_opts: tuple[str, ...],
    tasks: tuple[str, ...] | None,
    queues: tuple[str, ...] | None,
    max_inflight: int,
    dispatch_timeout: str,
    import_modules: tuple[str, ...],
) -> None:
    """Keep up to N engine jobs in flight, one `spool run-one` per ready job."""
    from spool import registry  # start-up: the dispatcher's modules, only this command needs
    from spool.runner.dispatch.dispatcher import Dispatcher  # start-up: as above
    from spool.runner.dispatch.engine import RunOne, default_label, open_engine, parse_options  # start-up: as above
    from spool.runner.remote.client import ApiClient  # start-up: as above

    timeout = flag_duration("--dispatch-timeout", dispatch_timeout) or 300.0
    options = parse_options(engine_opts)
    token, token_from = _remote_token(token, token_file)
    settings = load_settings(None, os.environ, app.flags)
    client = ApiClient(server, token, cacert, token_from=token_from)
    modules = tuple(dict.fromkeys([*settings.tasks, *import_modules]))
    if tasks is None:
        sys.path.insert(0, os.getcwd())
        registry.import_task_modules(list(modules))
        tasks = tuple(sorted(registry.registered()))
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in app.flags.items() if value is not None]
    command = (sys.executable, "-P", "-m", "spool.cli", *flags)  # no --spool: run-one has none
    run_one = RunOne(server, command, os.path.abspath(cacert) if cacert else None, modules)
    label = options.pop("label", None) or default_label(client.url, token)
    engine_ = open_engine(engine, run_one, token, label, options)
    crash.arm("dispatch", os.environ)
    _daemonise_stdio()
    setup_logging(settings.log_level, settings.log_format, "dispatch")
    dispatcher = Dispatcher(
        client, engine_, tasks=tasks, queues=queues, max_inflight=max_inflight, dispatch_timeout=timeout
    )
    sys.exit(dispatcher.run())
