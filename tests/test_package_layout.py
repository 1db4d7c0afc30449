"""The split between the readable reference and the fast path, checked from the source.

* ``transformer_course`` (the reference the notebooks import) uses no threads, no ctypes and no
  in-place array tricks (``out=`` arguments, augmented assignment to an array or a slice of one);
* it never imports ``transformer_course_fast``; the fast package imports the reference;
* the modules' import graph (both packages) has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"
REFERENCE = sorted((LIB / "transformer_course").glob("*.py"))
FAST = sorted((LIB / "transformer_course_fast").glob("*.py"))
SPEED_IMPORTS = {"threading", "ctypes", "concurrent", "multiprocessing", "numba", "transformer_course_fast"}


def module_name(path: Path) -> str:
    name = f"{path.parent.name}.{path.stem}"
    return path.parent.name if path.stem == "__init__" else name


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    package = path.parent.name
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = f"{package}.{node.module}" if node.level else node.module
            if node.level and node.module is None:
                base = package
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}   # `from . import x` names a module
    return found


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: p.name)
def test_reference_has_no_speed_tricks(path):
    tree = ast.parse(path.read_text())
    imports = {name.split(".")[0] for name in imported_modules(path)}
    assert not imports & SPEED_IMPORTS, f"{path.name} imports {imports & SPEED_IMPORTS}"
    if path.stem in ("__main__", "testing", "plotting"):          # demos and helpers, not concepts
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "out":
            pytest.fail(f"{path.name}:{node.value.lineno}: an out= argument (in-place)")
        if isinstance(node, ast.AugAssign) and not isinstance(node.value, ast.Constant):
            target = ast.unparse(node.target)
            if target not in ("total", "__all__"):                  # integer counters, the export list
                pytest.fail(f"{path.name}:{node.lineno}: in-place update of {target}")


def test_import_graph_has_no_cycle():
    modules = {module_name(p): p for p in REFERENCE + FAST}
    graph = {name: {m for m in imported_modules(path) if m in modules and m != name}
             for name, path in modules.items()}
    # a package's __init__ imports its modules; a module importing its own package's __init__
    # would close a cycle, and is reported like any other
    state: dict[str, str] = {}

    def visit(name, trail):
        if state.get(name) == "done":
            return
        assert state.get(name) != "open", "import cycle: " + " -> ".join(trail + [name])
        state[name] = "open"
        for other in sorted(graph[name]):
            visit(other, trail + [name])
        state[name] = "done"

    for name in sorted(graph):
        visit(name, [])
    assert "transformer_course.multihead" in graph["transformer_course_fast.attention"]   # fast -> reference
