"""Simulated remote workers: ``--threads`` of them in one process, under one token (pool mode),
each asking for a lease (a long-poll) and completing it at once with a tiny result, over HTTPS
keep-alive connections, until SIGTERM.

    python -m benchmarks.remote_sim --url URL --cacert PEM --token-file F [--threads N] [--tasks T,...]

What it is for: on one host, real remote workers (``spool worker --server``) spend ~2.5 ms of CPU
per job running their attempt child, so the workers, not ``spool serve``, take the machine's cores
and a second server has none to use. In a deployment the workers run on other hosts; this stands
in for them at a fraction of the CPU (its own is measured and reported), so the control plane
(``spool serve`` and the coordinator) is what the run measures. Nothing here runs a handler.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from spool.runner.remote.client import ApiClient, Unreachable  # noqa: E402

stopping = threading.Event()


def simulate(url: str, cacert: str, token: str, runner: str, tasks: list[str]) -> None:
    client = ApiClient(url, token, cacert)
    while not stopping.is_set():
        try:
            reply = client.call("/v1/leases", {"tasks": tasks, "wait": 2.0, "runner": runner}, timeout_seconds=15)
            if reply.status != 200:
                continue
            lease = reply.body["lease"]
            body = {"fence": lease["fence"], "result": {"ok": True}}
            client.call(f"/v1/leases/{lease['id']}/complete", body, timeout_seconds=30)
        except Unreachable:
            if not stopping.wait(0.1):
                continue
    client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--cacert", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--tasks", default="echo")
    parser.add_argument("--name", default="sim", help="runner names: NAME-1 ... NAME-N")
    o = parser.parse_args(argv)
    token = Path(o.token_file).read_text().strip()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    threads = [
        threading.Thread(
            target=simulate, args=(o.url, o.cacert, token, f"{o.name}-{n}", o.tasks.split(",")), daemon=True
        )
        for n in range(1, o.threads + 1)
    ]
    for thread in threads:
        thread.start()
    stopping.wait()
    for thread in threads:
        thread.join(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
