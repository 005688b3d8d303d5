"""The peer rows' table (``benchmarks/peers.py`` measures them) and the strace counts behind them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

SHAPES = {
    "a": "(a) one producer, one by one, workers draining",
    "b": "(b) backlog loaded first, then drained",
    "c": "(c) producers at once, workers draining",
}
NAMES = {"spool": "spool", "huey": "Huey", "pgqueuer": "pgqueuer", "procrastinate": "procrastinate"}
STALL_S = 20.0  # peers.STALL
SYNCS = ("fsync", "fdatasync", "sync_file_range", "syncfs")
_LINE = re.compile(r"^(\w+)\((.*)\)\s+=\s+\d+", re.MULTILINE)


def parse_strace(folder: Path, name: str) -> dict[str, int]:
    """Counts over ``strace -ff -z -o folder/name`` (one file per traced thread, NAME.TID)."""
    counts: Counter[str] = Counter()
    for path in folder.glob(name + ".*"):
        for call, args in _LINE.findall(path.read_text(errors="replace")):
            if call in SYNCS:
                counts[call] += 1
            elif call in ("mkdir", "mkdirat"):
                counts["creations"] += 1
            elif "O_TMPFILE" in args or ("O_CREAT" in args and "O_EXCL" in args) or call == "creat":
                counts["creations"] += 1
            elif "O_CREAT" in args:
                counts["O_CREAT (no O_EXCL)"] += 1
        path.unlink()
    return dict(counts)


def syncs(counts: dict[str, int]) -> int:
    return sum(counts.get(call, 0) for call in SYNCS)


def targets(shape: str, peer: str) -> str:
    """The issue's targets for spool against this peer, for this shape (numbers, not verdicts)."""
    if peer == "huey":
        return {"a": "drain >= 1.0x", "b": "drain >= 1.5x", "c": "submits >= 1.5x, drain >= 1.0x"}[shape]
    return "drain >= 2.0x"


def _calls(counts: dict[str, int], jobs: int) -> str:
    return " ".join(f"{c} {counts[c] / jobs:.2f}" for c in SYNCS if counts.get(c)) or "none"


def _ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}" if mine and theirs else "-"


def print_table(r: dict[str, Any], out: TextIO) -> None:
    systems = r["systems"]
    pg = f"PostgreSQL {r['postgres']} (fsync=on, synchronous_commit=on, run as {r['postgres_user']})"
    created = f"; a new file here cost {r['create_us']} us of CPU before the shapes" if "create_us" in r else ""
    print(f"\npeers (issue 19), 2 workers each; {pg if r['postgres'] else 'no PostgreSQL cluster'}{created}", file=out)
    if r.get("huey_sqlite"):
        sq = r["huey_sqlite"]
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        print(
            f"  Huey's SQLite connection: journal_mode={sq.get('journal_mode')}, "
            f"synchronous={names.get(sq.get('synchronous'), sq.get('synchronous'))}",
            file=out,
        )
    for line in dict.fromkeys(r["skipped"].values()):  # one line for one reason
        print(f"  {line}", file=out)
    if not systems:
        return
    spool = systems.get("spool", {})
    for shape, title in SHAPES.items():
        first = next(iter(systems.values()))[shape]
        size = f"{first['jobs']:,} jobs" + (f", {first['producers']} producers" if shape == "c" else "")
        print(f"  {title} ({size})", file=out)
        print(
            f"    {'system':<14} {'drain/s':>8} {'submits/s':>9} {'CPU ms/job':>10} {'(producers + system)':>21}"
            f"  {'spool/peer drain':>16} {'submits':>8}   target (spool/peer)",
            file=out,
        )
        for name, shapes in systems.items():
            row, mine = shapes[shape], spool.get(shape, {})
            cpu = row["cpu_ms"]
            line = (
                f"    {NAMES[name]:<14} {row['drain']:>8.0f} {row['submits']:>9.0f} "
                f"{cpu['producers'] + cpu['system']:>10.2f} "
                f"{'(' + format(cpu['producers'], '.2f') + ' + ' + format(cpu['system'], '.2f') + ')':>21}"
            )
            if name == "spool":
                line += f"  {'':>16} {'':>8}   CPU <= 1.0 ms/job"
            else:
                line += (
                    f"  {_ratio(mine.get('drain'), row['drain']):>16} {_ratio(mine.get('submits'), row['submits']):>8}"
                    f"   {targets(shape, name)}"
                )
            print(line, file=out)
        for name, shapes in systems.items():
            if shapes[shape].get("refused"):
                print(
                    f"    {NAMES[name]} refused {shapes[shape]['refused']} of {shapes[shape]['jobs']:,} submits "
                    "(an exception from its submit call; rates count the accepted ones)",
                    file=out,
                )
            if shapes[shape].get("lost"):
                print(
                    f"    {NAMES[name]} lost {shapes[shape]['lost']} of {shapes[shape]['jobs']:,} accepted jobs: "
                    f"no result within {STALL_S:.0f} s of the last one (rates count the finished ones; see its log)",
                    file=out,
                )
    traced = {name: shapes["strace"] for name, shapes in systems.items() if "strace" in shapes}
    if not traced:
        print("  fsync-family calls per job: n/a (no strace, or --peer-strace-jobs 0)", file=out)
        return
    jobs = next(iter(traced.values()))["jobs"]
    print(f"  fsync-family calls and file creations per job (strace -ff -z, shape (a), {jobs} jobs)", file=out)
    print(
        f"    {'system':<14} {'syncs/job':>9} {'producer':>9} {'workers+server':>15} {'creations/job':>14}"
        f"  {'spool/peer syncs':>16}   of them (producer | workers+server)",
        file=out,
    )
    mine_syncs = None
    if "spool" in traced:
        st = traced["spool"]
        mine_syncs = (syncs(st["producer"]) + syncs(st["system"])) / st["jobs"]
    for name, st in traced.items():
        n = st["jobs"]
        producer, system = syncs(st["producer"]) / n, syncs(st["system"]) / n
        creations = (st["producer"].get("creations", 0) + st["system"].get("creations", 0)) / n

        print(
            f"    {NAMES[name]:<14} {producer + system:>9.2f} {producer:>9.2f} {system:>15.2f} {creations:>14.2f}"
            f"  {('' if name == 'spool' else _ratio(mine_syncs, producer + system)):>16}"
            f"   {_calls(st['producer'], n)} | {_calls(st['system'], n)}",
            file=out,
        )
