"""A spin counterexample trail told as a story of moves, one line per step of the model.

``spin -t -p -g`` replays a trail and prints each transition as ``proc N (Name:1) file:LINE
(state S) [statement]``. Every statement that models code sits under a ``@step`` comment
(``/* @step <function> [crash=<role>:<step>,...] [: words] */``); the story names the process,
the function and what it does, and when a process takes the CRASH branch, the crash point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STEP = re.compile(r"@step\s+(?P<function>[\w.]+)(?:\s+crash=(?P<crash>[\w:,-]+))?(?:\s*:\s*(?P<words>.*?))?\s*\*/")
MOVE = re.compile(
    r"^\s*\d+:\s+proc\s+(?P<pid>\d+)\s+\((?P<name>[\w:]+?):\d+\)\s+\S+?:(?P<line>\d+)"
    r"\s+\(state \d+\)\s+\[(?P<stmt>.*)\]\s*$"
)
GLOBAL = re.compile(r"^\t\t(?P<name>[a-z]\w*(?:\[\d+\])?) = (?P<value>\d+)$")


@dataclass(frozen=True)
class Step:
    line: int
    function: str
    crash: tuple[str, ...]
    words: str


def steps_of(source: str) -> list[Step]:
    """Every ``@step`` comment of a model, with its line (1-based)."""
    found = []
    for number, text in enumerate(source.splitlines(), start=1):
        match = STEP.search(text)
        if match:
            crash = tuple(match["crash"].split(",")) if match["crash"] else ()
            found.append(Step(number, match["function"], crash, (match["words"] or "").strip()))
    return found


def owners(source: str, defines: frozenset[str] = frozenset()) -> dict[int, Step]:
    """Which step each line of the model belongs to: the lines after an ``@step`` comment, up to
    its CRASH (included) or the next option (``::``), preprocessor line, comment or block end.
    Steps inside ``#ifdef``/``#ifndef`` regions the ``defines`` leave out own nothing."""
    owner: dict[int, Step] = {}
    steps = {step.line: step for step in steps_of(source)}
    current: Step | None = None
    active = [True]
    for number, text in enumerate(source.splitlines(), start=1):
        stripped = text.strip()
        words = stripped.split()
        if words and words[0] in ("#ifdef", "#ifndef") and len(words) > 1:
            active.append(active[-1] and ((words[1] in defines) == (words[0] == "#ifdef")))
        elif words and words[0].startswith("#if"):
            active.append(active[-1])
        elif words and words[0] == "#else" and len(active) > 1:
            active[-1] = active[-2] and not active[-1]
        elif words and words[0] == "#endif" and len(active) > 1:
            active.pop()
        if not active[-1]:
            current = None
            continue
        if number in steps:
            current = steps[number]
            continue
        if current is None:
            continue
        if stripped.startswith(("::", "#", "/*", "fi", "od", "}")) or not stripped:
            current = None
            continue
        owner[number] = current
        if stripped.startswith("CRASH"):
            current = None
    return owner


def tell(model: Path, replay: str, defines: tuple[str, ...] = ()) -> list[str]:
    """The story of ``replay`` (the output of ``spin -t -p -g``) over ``model``'s source, built
    with ``defines`` (``NAME`` or ``NAME=value``)."""
    owner = owners(model.read_text(), frozenset(d.split("=", 1)[0] for d in defines))
    story: list[str] = []
    last: dict[str, tuple[Step, str] | None] = {}
    for text in replay.splitlines():
        match = MOVE.match(text)
        if match:
            who = f"{match['name'].lower()} {match['pid']}"
            stmt = match["stmt"]
            step = owner.get(int(match["line"]))
            if stmt.startswith("crashes = (crashes+1)"):
                where = step.crash if step else ()
                story.append(f"{who} CRASHES at {', '.join(where) or 'line ' + match['line']} (its locks are freed)")
                last[who] = None
                continue
            if step is None or last.get(who) == (step, match["line"]):
                continue
            last[who] = (step, match["line"])
            words = f": {step.words}" if step.words else ""
            story.append(f"{who} {step.function}{words}  [{stmt}]")
        elif text.startswith("spin: ") and "assertion violated" in text:
            story.append(f"PROPERTY VIOLATED: {_comment_at(model, text)}")
    return story


def _comment_at(model: Path, text: str) -> str:
    """The comment on the line of a violated assertion (``spin: m.pml:12, Error: ...``): its name."""
    match = re.search(r":(\d+), Error", text)
    if not match:
        return text
    line = model.read_text().splitlines()[int(match[1]) - 1]
    return line.split("/*", 1)[1].split("*/", 1)[0].strip() if "/*" in line else line.strip()


def final_globals(replay: str) -> str:
    """The globals the replay printed last, as one line: the state the story ends in."""
    values: dict[str, str] = {}
    for text in replay.splitlines():
        match = GLOBAL.match(text)
        if match:
            values[match["name"]] = match["value"]
    return " ".join(f"{k}={v}" for k, v in values.items())
