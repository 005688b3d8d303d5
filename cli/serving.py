"""``spool serve`` (the HTTPS API and dashboard) and ``spool token add|list|revoke``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from spool.base import crash
from spool.cli.app import App, example, SpoolCommand, command, pass_app
from spool.cli.render import echo_json, render_table
from spool.base.errors import NotFound, UsageError
from spool.base.timetext import format_time
from spool.tokens import ROLES, TokenStore


@command(
    epilog=example(
        "spool serve --host 0.0.0.0 --port 8443 --self-signed",
        "spool serve --cert /etc/spool/cert.pem --key /etc/spool/key.pem",
    )
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8443, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free one).")
@click.option("--cert", "cert_file", metavar="FILE", help="The server's certificate chain (PEM).")
@click.option("--key", "key_file", metavar="FILE", help="The certificate's private key (PEM).")
@click.option("--self-signed", is_flag=True, help="Use tls/cert.pem and tls/key.pem, made on first use.")
@click.option(
    "--reuse-port",
    is_flag=True,
    help="Share the port with other `spool serve --reuse-port` processes of this spool (SO_REUSEPORT).",
)
@pass_app
def serve(
    app: App, host: str, port: int, cert_file: str | None, key_file: str | None, self_signed: bool, reuse_port: bool
) -> None:
    """Serve the HTTPS API and the dashboard (HTTPS only, TLS 1.2 or newer).

    Several servers may serve one spool: with --reuse-port on one port (the kernel spreads the
    connections), or each on its own port behind a proxy. Dashboard logins hold on all of them."""
    from spool.runner.api import serve as server, tls  # start-up: uvicorn, starlette, cryptography only here

    if self_signed == bool(cert_file or key_file) or bool(cert_file) != bool(key_file):
        raise UsageError("serve takes --cert FILE --key FILE, or --self-signed")
    crash.arm("serve", os.environ)
    sp = app.spool()
    if self_signed:
        cert, key, made = tls.self_signed(sp)
        if made:
            click.echo(f"made a self-signed certificate: {cert}")
    else:
        cert, key = Path(str(cert_file)), Path(str(key_file))
    fingerprint = tls.fingerprint(cert)
    sock = server.bind(host, port, reuse_port=reuse_port)
    url = server.url_of(sock)

    def ready() -> None:
        if app.json_output:
            echo_json({"url": url, "cert": str(cert), "sha256": fingerprint})
        else:
            click.echo(f"certificate SHA-256 fingerprint {fingerprint}")
            click.echo(f"listening on {url}")
        sys.stdout.flush()

    server.serve(sp, sock, cert, key, on_ready=ready)


class TokenGroup(SpoolCommand, click.Group):
    """The group takes ``--spool`` and ``--json`` after its name too: ``spool token --json list``."""


@click.group(name="token", cls=TokenGroup, epilog=example("spool token add ci --role submit --out ci.token"))
def token() -> None:
    """API tokens: add (prints the token once), list, revoke."""


@token.command("add", cls=SpoolCommand)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES), help="What the token may do.")
@click.option(
    "--out",
    "out_file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Write the token alone to FILE (made 0600, never replaced) and print no secret.",
)
@pass_app
def token_add(app: App, name: str, role: str, out_file: str | None) -> None:
    """Make a token for NAME (a work token's name is its worker's name); prints it once, last,
    or with --out writes it to a new file (for --token-file) and prints only where.

    \b
    Example:
      spool token add build-7 --role work --out build-7.token
      spool worker --server https://HOST:8443 --token-file build-7.token --cacert cert.pem
    """
    out = _claim_out_file(out_file) if out_file else None  # refused before a token exists
    try:
        value = TokenStore(app.spool()).add(name, role)
    except BaseException:
        if out is not None:
            os.close(out)
            os.unlink(str(out_file))
        raise
    if out is not None:
        try:
            os.write(out, value.encode() + b"\n")
            os.fsync(out)
        finally:
            os.close(out)
        if app.json_output:
            echo_json({"name": name, "role": role, "token_file": str(out_file)})
        else:
            click.echo(f"token {name} ({role}) written to {out_file}")
        return
    if app.json_output:
        echo_json({"name": name, "role": role, "token": value})
    else:
        click.echo(f"token {name} ({role}), shown this once: {value}")


def _claim_out_file(path: str) -> int:
    """``--out FILE``, created new and 0600 (an existing file, or a symlink, is never replaced)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise UsageError(f"--out {path}: the file exists; nothing was written (remove it, or name another)") from None
    except OSError as err:
        raise UsageError(f"--out {path}: {err.strerror or err}") from None


@token.command("list", cls=SpoolCommand, epilog=example("spool token list"))
@pass_app
def token_list(app: App) -> None:
    """Names, roles, when each was made and last used (never the tokens)."""
    infos = TokenStore(app.spool()).list()
    if app.json_output:
        echo_json(
            [
                {
                    "name": info.name,
                    "role": info.role,
                    "created": format_time(info.created),
                    "last_used": None if info.last_used is None else format_time(info.last_used),
                }
                for info in infos
            ]
        )
        return
    rows = [
        [
            info.name,
            info.role,
            format_time(info.created),
            "never" if info.last_used is None else format_time(info.last_used),
        ]
        for info in infos
    ]
    render_table(["name", "role", "created", "last used"], rows)


@token.command("revoke", cls=SpoolCommand, epilog=example("spool token revoke build-7"))
@click.argument("name")
@pass_app
def token_revoke(app: App, name: str) -> None:
    """Revoke NAME's token: refused at the server's next request, and a work token's leases (a
    dispatch token's: its runners') fenced now (expired, the try already counted at pickup), so
    its worker's attempts can neither finish nor hold their jobs until the term runs out."""
    # start-up: only a revoke reads leases; `token add` and `list` never do
    from spool.moves import fence_worker

    sp = app.spool()
    tokens = TokenStore(sp)
    role = next((info.role for info in tokens.list() if info.name == name), None)
    if not tokens.revoke(name):
        raise NotFound(f"no token named {name!r}")
    fenced = fence_worker(sp, name) if role != "submit" else []  # a submit token never holds a lease
    if role == "dispatch":  # its runners hold as <name>/<runner>: each one the server heard from
        runners = sorted({row[0] for row in sp.ledger.remote_workers(0.0) if row[0].startswith(f"{name}/")})
        fenced += [job_id for runner in runners for job_id in fence_worker(sp, runner)]
    if app.json_output:
        echo_json({"revoked": name, "fenced": fenced})
    else:
        click.echo(f"token {name} revoked" + (f"; its leases fenced: {', '.join(fenced)}" if fenced else ""))
