"""The crash-point table in ``spool.base.crash`` against the source: every step a ``crash.point(...)``
reaches is in the table, and every step in the table is reached somewhere.

The source is read, not imported, so a point in a module nothing imports still counts. A step
is reached by ``crash.point("step")``, or by a ``crash_step="step"`` argument to a helper that
passes it on to ``crash.point(crash_step)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from spool.base import crash

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spool", "runner", "cli")
PASSED_ON = "crash_step"  # the one name a step may reach crash.point() under, not as a literal


def _sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _is_crash_point(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "point"
        and isinstance(func.value, ast.Name)
        and func.value.id == "crash"
    )


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def scan() -> tuple[dict[str, list[str]], list[str]]:
    """(step -> where it is reached, calls whose step is neither a literal nor ``crash_step``)."""
    used: dict[str, list[str]] = {}
    unreadable: list[str] = []
    for path in _sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if _is_crash_point(node):
                step = _literal(node.args[0]) if len(node.args) == 1 and not node.keywords else None
                if step is not None:
                    used.setdefault(step, []).append(where)
                elif not (len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == PASSED_ON):
                    unreadable.append(where)
            for keyword in node.keywords:
                if keyword.arg == PASSED_ON:
                    step = _literal(keyword.value)
                    if step is None:
                        unreadable.append(where)
                    else:
                        used.setdefault(step, []).append(where)
    return used, unreadable


def test_the_scan_finds_the_points() -> None:
    used, _ = scan()
    assert "after-commit" in used and "complete-after-move" in used  # a literal, and one passed on


def test_every_point_in_the_source_has_a_literal_step() -> None:
    _, unreadable = scan()
    assert not unreadable, f"crash.point() with a step the table can't be checked against: {unreadable}"


def test_every_step_reached_is_in_the_table() -> None:
    used, _ = scan()
    listed = {step for steps in crash.CRASH_POINTS.values() for step in steps}
    missing = {step: where for step, where in used.items() if step not in listed}
    assert not missing, f"crash points reached but not in spool.base.crash.CRASH_POINTS: {missing}"


def test_every_step_in_the_table_is_reached() -> None:
    used, _ = scan()
    stale = sorted(
        {f"{role}:{step}" for role, steps in crash.CRASH_POINTS.items() for step in steps if step not in used}
    )
    assert not stale, f"spool.base.crash.CRASH_POINTS lists steps no code reaches: {stale}"


def test_the_table_lists_each_point_once() -> None:
    points = crash.all_points()
    assert len(points) == len(set(points))
