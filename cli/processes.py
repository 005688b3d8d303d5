"""Commands that run processes: coordinator, worker, run (the supervisor), and the demo."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import click

from spool.base import crash
from spool.cli.app import App, example, command, pass_app
from spool.cli.render import render_table
from spool.base.errors import SpoolError, UsageError
from spool.disk import State
from spool.settings import load_settings
from spool.runner.lifeline import die_with_parent
from spool.runner.logs import setup_logging
from spool.runner.supervisor import ChildSpec, Supervisor
from spool.spool import Spool
from spool.workers import WORKER_NAME

_import_option = click.option(
    "--import",
    "import_modules",
    multiple=True,
    metavar="MODULE",
    help="A module registering tasks (repeatable; adds to the `tasks` setting).",
)
TOKEN_ENV = "SPOOL_TOKEN"  # `worker --server`'s token from the environment (a container's secret, say)
_shell_option = click.option("--allow-shell", is_flag=True, help="Run `shell` jobs (their argv is run as given).")


def _queue_names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``--queues A,B``: the queues to claim from, each a name with an id's grammar (None: every queue)."""
    if value is None:
        return None
    from spool.disk import is_valid_id  # start-up: the flag's check only

    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    for name in names:
        if not is_valid_id(name):
            raise click.BadParameter(f"{name!r} is not a queue name (letters, digits, '_' and '-')")
    if not names:
        raise click.BadParameter("expected queue names, comma-separated")
    return names


_queues_option = click.option(
    "--queues",
    metavar="Q,...",
    callback=_queue_names,
    help="Claim only jobs of these queues (comma-separated; default: every queue).",
)


def _daemonise_stdio() -> None:
    """A stray write on fd 0 must never land in a spool file; die with our supervisor."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    parent = os.environ.get("SPOOL_PARENT_PID")
    if parent and parent.isascii() and parent.isdigit():
        die_with_parent(int(parent))


@command(epilog=example("spool coordinator &"))
@pass_app
def coordinator(app: App) -> None:
    """Run the coordinator: drops, leases, delays, retries, chains, reconcile."""
    from spool.runner.coordinator import run_coordinator  # start-up: ~5 ms that no other command needs

    sp = app.spool()
    _daemonise_stdio()
    setup_logging(sp.settings.log_level, sp.settings.log_format, "coordinator")
    sys.exit(run_coordinator(sp))


@command(
    epilog=example(
        "spool worker --import myapp.tasks --queues default,images",
        "spool worker --server https://HOST:8443 --token-file worker.token --cacert cert.pem --import myapp.tasks",
    )
)
@_import_option
@_shell_option
@_queues_option
@click.option("--burst", is_flag=True, help="Exit when no ready job is left (for scripts and tests).")
@click.option("--name", help="Worker name (default host-pid-random; must be unique).")
@click.option("--server", metavar="URL", help="Work for a remote spool through its API (https://host:port).")
@click.option(
    "--token",
    metavar="TOKEN",
    help="With --server: a work token (its name is this worker's name). Visible in ps: prefer "
    "--token-file or $SPOOL_TOKEN.",
)
@click.option(
    "--token-file", metavar="FILE", type=click.Path(dir_okay=False), help="With --server: read the token from FILE."
)
@click.option("--cacert", metavar="FILE", help="With --server: trust this CA (a self-signed server's cert.pem).")
@click.option(
    "--runner",
    metavar="NAME",
    help="With --server and a dispatch token: this worker's runner name; its leases are held by "
    "TOKEN-NAME/NAME, so many workers share one token (a Slurm array, a Kubernetes Deployment).",
)
@pass_app
def worker(
    app: App,
    import_modules: tuple[str, ...],
    allow_shell: bool,
    queues: tuple[str, ...] | None,
    burst: bool,
    name: str | None,
    server: str | None,
    token: str | None,
    token_file: str | None,
    cacert: str | None,
    runner: str | None,
) -> None:
    """Run a worker: claim jobs of the tasks it knows, run each attempt in a child process."""
    if server is not None:
        remote = RemoteOptions(server, token, token_file, cacert, runner)
        sys.exit(_remote_worker(app, import_modules, allow_shell, queues, burst, name, remote))
    if token or token_file or cacert or runner:
        raise UsageError("--token, --token-file, --cacert and --runner go with --server URL")
    from spool.runner.worker import Worker  # start-up: ~13 ms that no other command needs

    sp = app.spool()
    _daemonise_stdio()
    setup_logging(sp.settings.log_level, sp.settings.log_format, "worker")
    sys.path.insert(0, os.getcwd())  # so `--import examples.tasks` works from a checkout
    crash.arm("worker", os.environ)
    worker = Worker(
        sp,
        import_modules=import_modules,
        allow_shell=allow_shell,
        burst=burst,
        name=name,
        sys_path=[os.getcwd()],
        queues=queues,
    )
    sys.exit(worker.run())


@dataclass(frozen=True)
class RemoteOptions:
    """``worker --server``'s own flags."""

    server: str
    token: str | None
    token_file: str | None
    cacert: str | None
    runner: str | None  # pool mode: a dispatch token's runner


def _remote_worker(
    app: App,
    import_modules: tuple[str, ...],
    allow_shell: bool,
    queues: tuple[str, ...] | None,
    burst: bool,
    name: str | None,
    remote: RemoteOptions,
) -> int:
    """``worker --server``: no spool folder here; the settings come from the environment and flags."""
    # start-up: the remote worker's modules (ssl, http.client) only this command needs
    from spool.runner.remote.worker import run_remote_worker
    from spool.runner.remote.client import ApiClient  # start-up: as above

    if name is not None:
        raise UsageError(
            "--name does not go with --server: the work token's name is the worker's name "
            "(with a dispatch token, name each worker with --runner)"
        )
    if remote.runner is not None and not WORKER_NAME.fullmatch(remote.runner):
        raise UsageError(f"--runner {remote.runner!r}: expected letters, digits, '_', '.' and '-', at most 64")
    token, token_from = _remote_token(remote.token, remote.token_file)
    settings = load_settings(None, os.environ, app.flags)
    client = ApiClient(remote.server, token, remote.cacert, token_from=token_from)
    _daemonise_stdio()
    setup_logging(settings.log_level, settings.log_format, "worker")
    sys.path.insert(0, os.getcwd())  # so `--import examples.tasks` works from a checkout
    return run_remote_worker(
        client,
        settings,
        import_modules=import_modules,
        allow_shell=allow_shell,
        burst=burst,
        sys_path=[os.getcwd()],
        queues=queues,
        runner=remote.runner,
    )


def _remote_token(token: str | None, token_file: str | None) -> tuple[str, str]:
    """The work token and where it came from: ``--token-file FILE``, ``$SPOOL_TOKEN`` or ``--token``.

    ``--token`` stays (scripts use it), with a warning: a command line is world-readable on
    Linux (``ps``, /proc/PID/cmdline), a file of mode 0600 and the environment (/proc/PID/environ)
    are not."""
    if token is not None and token_file is not None:
        raise UsageError("--token and --token-file: give one of them")
    if token is not None:
        click.echo(
            "spool: warning: --token shows the token to every user of this host (ps, /proc/PID/cmdline); "
            f"pass it with --token-file FILE or ${TOKEN_ENV} instead",
            err=True,
        )
        return token, "--token"
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as handle:
                return handle.read(4096).strip(), f"--token-file {token_file}"
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise UsageError(f"--token-file {token_file}: {reason}") from None
    if os.environ.get(TOKEN_ENV):
        # Out of our environment at once: the attempt children (a handler, a shell job) inherit it.
        return os.environ.pop(TOKEN_ENV).strip(), f"${TOKEN_ENV}"
    raise UsageError(f"--server needs a work token: --token-file FILE, ${TOKEN_ENV} or --token TOKEN")


def supervisor_specs(
    app: App, workers: int, import_modules: tuple[str, ...], allow_shell: bool, queues: tuple[str, ...] | None = None
) -> list[ChildSpec]:
    # The spool through our own descriptor of it, so a child restarted after the spool folder was
    # renamed still finds it (children die with us, so the descriptor outlives every one of them).
    here = f"/proc/{os.getpid()}/fd/{app.spool().layout.root_fd}"
    # -P: the installed spool, never a `spool/` folder in the cwd (a checkout, or one planted there).
    base = [sys.executable, "-P", "-m", "spool.cli", *app.flag_argv(), "--spool", here]
    extra = [arg for module in import_modules for arg in ("--import", module)]
    extra += ["--allow-shell"] if allow_shell else []
    extra += ["--queues", ",".join(queues)] if queues is not None else []
    env = dict(os.environ)
    specs = [ChildSpec("coordinator", [*base, "coordinator"], env)]
    specs += [ChildSpec(f"worker-{n}", [*base, "worker", *extra], env) for n in range(1, workers + 1)]
    return specs


@command(epilog=example("spool run --workers 4 --import myapp.tasks"))
@click.option(
    "--workers",
    type=click.IntRange(0, 256),
    default=2,
    show_default=True,
    help="Worker processes beside the coordinator.",
)
@_import_option
@_shell_option
@_queues_option
@pass_app
def run(
    app: App, workers: int, import_modules: tuple[str, ...], allow_shell: bool, queues: tuple[str, ...] | None
) -> None:
    """Supervise a coordinator and N workers on this host; restart any that die."""
    sp = app.spool()
    setup_logging(sp.settings.log_level, sp.settings.log_format, "run")
    supervisor = Supervisor(
        supervisor_specs(app, workers, import_modules, allow_shell, queues),
        grace_seconds=sp.settings.grace_seconds,
        log=logging.getLogger("spool.run").info,
        error_log=logging.getLogger("spool.run").error,
    )
    sys.exit(supervisor.run())


@click.command(epilog=example("spool demo --workers 4"))
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, help="Worker processes to run.")
@click.option("--keep", is_flag=True, help="Keep the demo spool instead of removing it.")
@click.option(
    "--timeout",
    "timeout_seconds",
    type=float,
    default=120.0,
    show_default=True,
    help="Give up after this many seconds.",
)
@pass_app
def demo(app: App, workers: int, keep: bool, timeout_seconds: float) -> None:
    """The README's first run: count the words of the example texts with real workers."""
    home = Path(tempfile.mkdtemp(prefix="spool-demo-"))
    root = home / "spool"
    sp = Spool.init(root, environ={}, flags={"poll_seconds": 0.5})
    texts = _copy_texts(home / "texts")
    click.echo(f"spool at {root}; submitting {len(texts)} word-count jobs")
    ids = {path.name: sp.submit("wordcount", {"path": str(path)}, key=f"demo-{path.stem}") for path in texts}
    argv = [
        sys.executable,
        "-P",  # the installed spool, even run from a checkout whose spool/ would shadow it
        "-m",
        "spool.cli",
        "--spool",
        str(root),
        "--poll-seconds",
        "0.5",
        "--log-level",
        "warning",
        "run",
        "--workers",
        str(workers),
    ]
    started = time.monotonic()
    supervisor = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        states = sp.wait(ids.values(), timeout_seconds=timeout_seconds)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout=30)
        except subprocess.TimeoutExpired:
            supervisor.kill()
    elapsed = time.monotonic() - started
    rows, total = [], 0
    for name, job_id in ids.items():
        state = states[job_id]
        words = sp.result(job_id)["words"] if state is State.DONE else None
        total += words or 0
        rows.append([name, state.value if state else "?", words if words is not None else "-", job_id])
    render_table(["text", "state", "words", "job"], rows)
    click.echo(f"{total} words in {len(ids)} texts, {workers} workers, {elapsed:.1f}s")
    if keep:
        click.echo(f"look around: ls {root}/*/   cat {root}/done/*.yaml")
    else:
        sp.close()
        shutil.rmtree(home, ignore_errors=True)
    if any(state is not State.DONE for state in states.values()):
        raise SpoolError("not every demo job finished")


def _copy_texts(target: Path) -> list[Path]:
    target.mkdir(parents=True)
    copied = []
    source = resources.files("spool.examples") / "texts"
    for entry in sorted(source.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            path = target / entry.name
            path.write_bytes(entry.read_bytes())
            copied.append(path)
    if not copied:
        raise UsageError("the example texts are missing from the installed package")
    return copied
