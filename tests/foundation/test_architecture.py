"""The architecture, read from the imports: no module of the project is part of an import cycle.

The layers themselves (``coloco_cli | bench`` > ``ledger | trainer`` > ``reference`` > ``protocol``)
are import-linter contracts in pyproject.toml, checked by ``lint-imports`` in ``make test``. This
test adds what a layers contract cannot see: two modules of one package importing each other,
at module level or inside a function (a lazy import is still a knot). Imports under
``TYPE_CHECKING`` are not counted: they never run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

PACKAGES = ("protocol", "reference", "trainer", "ledger", "coloco_cli", "bench")


def cycles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles of a graph: each strongly connected component of more than one module
    (Tarjan's algorithm, iterative), less a package's ``__init__`` importing its own modules
    (which is how a package exposes its parts, not a knot)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, todo = work[-1]
            if todo:
                w = todo.pop()
                if w not in imports:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, sorted(imports[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                leaves = [m for m in component if not any(o.startswith(m + ".") for o in component)]
                if len(leaves) > 1:
                    found.append(sorted(component))
    return found


def project_imports(*packages: str) -> dict[str, set[str]]:
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True)
    return {
        m: {d for d in graph.find_modules_directly_imported_by(m) if d in graph.modules}
        for m in graph.modules
    }


def test_no_module_of_the_project_is_in_an_import_cycle() -> None:
    found = cycles(project_imports(*PACKAGES))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_check_finds_a_cycle_through_a_lazy_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check itself can fail: a cycle closed by an import inside a function is found, a
    package exposing its modules is not a cycle, and a TYPE_CHECKING import is not counted."""
    pkg = tmp_path / "knot"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from knot import a, b, c\n")
    (pkg / "a.py").write_text("from knot import b\n")
    (pkg / "b.py").write_text("def f():\n    from knot import a\n    return a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from knot import a\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = cycles(project_imports("knot"))
    assert found == [["knot.a", "knot.b"]] or found == [["knot", "knot.a", "knot.b"]]
    sys.modules.pop("knot", None)
