"""The house rules that hold the layers apart, checked on the source itself.

Every import of spool/, runner/ and cli/ counts, wherever it sits (top level, inside a function,
under ``if TYPE_CHECKING``): the graph they make has no cycle, its arrows point down
(cli -> runner -> spool), and an import inside a function says why on its line or the line above
(the only reason we accept is start-up time). spool/ reads time and chance only through
``spool.base.clock``. No module is over 400 lines.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from support import ROOT

from spool import Spool
from spool.base.surface import surface_of


def _installed() -> dict[str, Path]:
    """Every package pyproject.toml installs, with its folder in the repository: its package-dir,
    or its parent's folder and its own name (setuptools' rule)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders: dict[str, Path] = {}
    for name in setup["packages"]:
        parent, _, leaf = name.rpartition(".")
        folders[name] = ROOT / setup["package-dir"][name] if name in setup["package-dir"] else folders[parent] / leaf
    return folders


INSTALLED = _installed()
# The packages under the house rules: every installed one but the examples (a user's side of the API).
PACKAGES = {name: folder for name, folder in INSTALLED.items() if name != "spool.examples"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


MODULES = _modules()


def test_every_package_folder_is_installed() -> None:
    """A folder with an ``__init__.py`` that pyproject.toml does not list is left out of a plain
    ``pip install .`` (an editable install finds it anyway, so the suite would not notice):
    spool/fsck/ and runner/dispatch/ were, and a pip-installed ``spool run`` could not start its
    coordinator (``No module named 'spool.fsck'``) nor ``spool dispatch`` its engines."""
    tops = ("spool", "runner", "cli", "examples")
    folders = {init.parent for top in tops for init in (ROOT / top).rglob("__init__.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders - set(INSTALLED.values())) == []
    assert [name for name, folder in INSTALLED.items() if not (folder / "__init__.py").is_file()] == []


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    local: bool  # inside a function body


def _package_of(module: str) -> str:
    return module if MODULES[module].stem == "__init__" else module.rsplit(".", 1)[0]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The project modules an import statement loads (``from spool import crash`` is spool.base.crash;
    ``from spool import Spool`` is the package ``spool`` itself)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in MODULES:
                    yield ".".join(parts[:end])
                    break
        return
    origin = _resolve(module, node)
    for alias in node.names:
        if f"{origin}.{alias.name}" in MODULES:
            yield f"{origin}.{alias.name}"
        elif origin in MODULES:
            yield origin


def _edges(module: str) -> Iterator[Edge]:
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))

    def visit(node: ast.AST, local: bool) -> Iterator[Edge]:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, child):
                    if target != module:
                        yield Edge(module, target, child.lineno, local)
            yield from visit(child, inner)

    yield from visit(tree, False)


EDGES = list(dict.fromkeys(edge for module in MODULES for edge in _edges(module)))


def _layer(module: str) -> int:
    if module == "spool.cli" or module.startswith("spool.cli."):
        return 2
    if module == "spool.runner" or module.startswith("spool.runner."):
        return 1
    return 0


def _cycles(unit_of: Callable[[str], str] = str) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan); a unit is a module, or
    what ``unit_of`` makes of it."""
    graph: dict[str, set[str]] = {unit_of(module): set() for module in MODULES}
    for edge in EDGES:
        if unit_of(edge.source) != unit_of(edge.target):
            graph[unit_of(edge.source)].add(unit_of(edge.target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _where(edge: Edge) -> str:
    return f"{MODULES[edge.source].relative_to(ROOT)}:{edge.line} imports {edge.target}"


def test_the_graph_sees_every_module_and_the_imports_it_should() -> None:
    """Guards the scanner itself: if it stopped seeing imports, the tests below could not fail."""
    assert {"spool", "spool.job", "spool.runner.worker", "spool.cli.main"} <= set(MODULES)
    assert any(e.source == "spool.runner.worker" and e.target == "spool.spool" for e in EDGES)
    assert any(e.source == "spool" and e.target == "spool.spool" and e.local for e in EDGES)


def test_no_import_cycle_counting_local_and_type_checking_imports() -> None:
    cycles = _cycles()
    lines = []
    for component in cycles:
        members = set(component)
        lines.append(" <-> ".join(component))
        lines += [f"    {_where(e)}" for e in EDGES if e.source in members and e.target in members]
    assert not cycles, "import cycles:\n" + "\n".join(lines)


# A subpackage with no subpackages of its own is one unit; a module loose in a package that has
# subpackages (spool.job, spool.runner.worker, spool.runner.api.app) is a unit by itself.
LEAF_PACKAGES = {p for p in PACKAGES if not any(q.startswith(p + ".") for q in PACKAGES)}


def _unit_of(module: str) -> str:
    package = _package_of(module)
    return package if package in LEAF_PACKAGES else module


def test_no_import_cycle_between_subpackages() -> None:
    cycles = _cycles(_unit_of)
    lines = []
    for component in cycles:
        members = set(component)
        lines.append(" <-> ".join(component))
        lines += [
            f"    {_where(e)}"
            for e in EDGES
            if _unit_of(e.source) in members
            and _unit_of(e.target) in members
            and _unit_of(e.source) != _unit_of(e.target)
        ]
    assert not cycles, "import cycles between subpackages:\n" + "\n".join(lines)


def test_no_folder_holds_more_than_15_modules() -> None:
    """A folder is a floor a newcomer reads by its names; past about 15 they stop saying where a change goes."""
    crowded = [
        f"{folder.relative_to(ROOT)}: {n}" for folder in PACKAGES.values() if (n := len(list(folder.glob("*.py")))) > 16
    ]
    assert not crowded, "folders over 15 modules (besides __init__):\n" + "\n".join(crowded)


# What runner/ and cli/ may import from spool/: the facade and the records and services a process
# uses whole, the floor (spool.base), and each other subpackage only through its surface: the names
# its __init__ lists under TYPE_CHECKING and loads on first use (spool.base.surface).
SURFACE_MODULES = {
    *("spool", "spool.spool", "spool.handle", "spool.job", "spool.progress", "spool.attemptlog"),
    *("spool.settings", "spool.registry", "spool.tokens", "spool.workers", "spool.admin", "spool.fsck", "spool.queues"),
}
SURFACE_PACKAGES = ("spool.disk", "spool.yaml", "spool.ledger", "spool.moves", "spool.schedule", "spool.views")


def _allowed(origin: str, name: str | None) -> bool:
    """May runner/ or cli/ write ``from origin import name`` (``import origin``: name None)?"""
    if origin == "spool.base" or origin.startswith("spool.base."):
        return True
    if origin in SURFACE_PACKAGES:
        return name is not None and name in surface_of(MODULES[origin])
    if origin == "spool" and name is not None and f"spool.{name}" in MODULES:
        return f"spool.{name}" in SURFACE_MODULES or f"spool.{name}".startswith("spool.base")
    return origin in SURFACE_MODULES


def test_runner_and_cli_reach_spool_only_through_its_surface() -> None:
    stray = []
    for module, path in MODULES.items():
        if not _layer(module):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                wanted = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                wanted = [(alias.name, None) for alias in node.names]
            else:
                continue
            for origin, name in wanted:
                if origin.split(".")[0] == "spool" and not _layer(origin) and not _allowed(origin, name):
                    stray.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name or ''} from {origin}")
    assert not stray, "runner/ and cli/ imports past spool's surface:\n" + "\n".join(stray)


def test_every_surface_name_loads_what_its_init_says() -> None:
    for package in SURFACE_PACKAGES:
        loaded = importlib.import_module(package)
        for name, (module, attribute) in surface_of(MODULES[package]).items():
            where = importlib.import_module(f"{package}.{attribute}" if module == package else module)
            expected = where if module == package else getattr(where, attribute)
            assert getattr(loaded, name) is expected, f"{package}.{name}"
    assert _allowed("spool.moves", "claim_held") and not _allowed("spool.moves.transitions", "claim_held")
    assert not _allowed("spool.moves", "rewrite_job") and not _allowed("spool.fsck.keys", "judge_reservation")


def test_arrows_point_down_cli_then_runner_then_spool() -> None:
    upward = [_where(e) for e in EDGES if _layer(e.target) > _layer(e.source)]
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_an_import_inside_a_function_says_why() -> None:
    unexplained = []
    for edge in EDGES:
        if not edge.local:
            continue
        lines = MODULES[edge.source].read_text().splitlines()
        here, above = lines[edge.line - 1], lines[edge.line - 2] if edge.line > 1 else ""
        if "start-up" not in here and "start-up" not in above:
            unexplained.append(_where(edge))
    assert not unexplained, "function-local imports without a `# start-up: ...` reason:\n" + "\n".join(unexplained)


MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    """A module is one idea a reader holds at once; past this many lines it is two, and wants splitting."""
    long = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in MODULES.values()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)


# Reading a clock or drawing a random number decides things; spool/ does both only through a Clock.
# Unique names (ids, tmp names) may take bytes from os.urandom or secrets: that decides nothing.
CLOCK_CALLS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "sleep"),
    ("time", "perf_counter"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
}


def test_spool_reads_time_and_chance_only_through_its_clock() -> None:
    found = []
    for module, path in MODULES.items():
        if _layer(module) or module == "spool.base.clock":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import) and any(a.name == "random" for a in node.names):
                found.append(f"{where} imports random")
            elif isinstance(node, ast.ImportFrom) and node.module in ("random", "time"):
                found.append(f"{where} imports from {node.module}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in CLOCK_CALLS
            ):
                found.append(f"{where} reads {node.value.id}.{node.attr}")
    assert not found, "clock or randomness outside spool.base.clock:\n" + "\n".join(found)


OUTSIDE_POINTER = re.compile(r"RELIABILITY\.md|SPEC\.md|\bSPEC\b(?![_A-Za-z])")


def test_no_comment_points_at_a_file_outside_the_repository() -> None:
    """SPEC.md and RELIABILITY.md are not in this repository: say the thing, or point into docs/."""
    outside = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in MODULES.values()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE_POINTER.search(line)
    ]
    assert not outside, "pointers to files that are not here:\n" + "\n".join(outside)


# Loaded by claims and the coordinator, never needed to submit: each costs `spool submit` start-up
# (issue 9's target, which issue 19 keeps), spool.queues alone 3-6 ms of ~90 (2026-12-07).
NOT_FOR_A_SUBMIT = ("spool.queues", "spool.runner", "spool.views")


def test_spool_submit_loads_nothing_only_claims_or_views_need(tmp_path: Path) -> None:
    Spool.init(tmp_path / "sp", environ={}).close()
    probe = (
        "import sys\n"
        "from spool.cli.main import main\n"
        f"sys.argv = ['spool', '--spool', {str(tmp_path / 'sp')!r}, 'submit', 'echo', '-a', 'x=1']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('spool', 'yaml')))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = done.stderr.split()
    assert "spool.moves.submission" in loaded  # the probe did submit
    assert not [name for name in loaded if name.startswith(NOT_FOR_A_SUBMIT)], loaded
    assert "yaml" not in loaded  # PyYAML (~9 ms): the plain writer made the job file
