"""A subpackage's surface: the names runner/ and cli/ may import from it, loaded on first use.

A subpackage's ``__init__`` lists its surface once, as the imports under ``if TYPE_CHECKING:``
(so mypy and a reader see each name and where it lives) and ends with
``__getattr__ = lazy_surface(__name__, __file__)``. At run time nothing is imported until a name
is asked for: ``from spool.moves import claim_held`` loads ``spool.moves.transitions`` and no
other module, so a producer that submits never pays for recovery or admin (start-up is on the
``spool submit`` path). tests/unit/test_import_graph.py holds runner/ and cli/ to these names.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path


def surface_of(init_file: str | Path) -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of each import under ``if TYPE_CHECKING:`` in ``init_file``;
    a module that is the package itself names a submodule (``from spool.views import browse``)."""
    tree = ast.parse(Path(init_file).read_text(), str(init_file))
    found: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module:
                for alias in statement.names:
                    found[alias.asname or alias.name] = (statement.module, alias.name)
    return found


def lazy_surface(package: str, init_file: str) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: a surface name is imported where it lives."""
    table: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> object:
        if not table:
            table.update(surface_of(init_file))
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = table[name]
        if module == package:  # ``from spool.views import browse``: a submodule by name
            return importlib.import_module(f"{package}.{attribute}")
        return getattr(importlib.import_module(module), attribute)

    return __getattr__
