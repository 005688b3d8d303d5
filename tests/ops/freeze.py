"""``python freeze.py stop|cont PID``: SIGSTOP (or SIGCONT) a process and every descendant.

The test's stand-in for ``systemctl freeze``: ``spool run`` starts its coordinator and workers in
sessions of their own (and they their attempt children), so a signal to the supervisor's process
group stops only the supervisor. The tree is walked from /proc until a pass finds no process that
was not signalled yet: the supervisor is stopped first, so nothing it restarts escapes.
"""

from __future__ import annotations

import os
import signal
import sys


def children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def signal_tree(root: int, signum: int) -> None:
    done: set[int] = set()
    while True:
        tree, todo, found = children(), [root], []
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(tree.get(pid, []))
        fresh = [pid for pid in found if pid not in done]
        if not fresh:
            return
        for pid in fresh:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
            done.add(pid)


if __name__ == "__main__":
    signal_tree(int(sys.argv[2]), signal.SIGSTOP if sys.argv[1] == "stop" else signal.SIGCONT)
