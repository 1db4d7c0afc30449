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


# Names kept for the notebooks that call them (07: MiniLM's loaders, 09: SmolLM2's), each an alias of a
# function whose own name says which model it loads.
NOTEBOOK_ALIASES = {
    "transformer_course.pretrained": {"model_path": "minilm_path", "load_config": "load_minilm_config",
                                      "load_weights": "load_minilm_weights", "load_tokenizer": "load_minilm_tokenizer",
                                      "load_reference": "load_minilm_reference"},
    "transformer_course.smollm2": {"model_path": "smollm2_path", "read_gguf": "read_smollm2_gguf",
                                   "load_tokenizer": "tokenizer_from_metadata", "load_weights": "weights_from_gguf"},
    "transformer_course.smollm2_reference": {"load_reference": "load_torch_smollm2"},
}


def test_each_public_function_is_defined_under_one_name_in_one_module():
    """A public name defined (def/class) in two modules of the reference means two things: refused."""
    where: dict[str, list[str]] = {}
    for path in REFERENCE:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(path.name)
    assert not {n: m for n, m in where.items() if len(m) > 1}, {n: m for n, m in where.items() if len(m) > 1}


@pytest.mark.parametrize("module", sorted(NOTEBOOK_ALIASES))
def test_the_notebooks_loader_names_are_aliases(module):
    import importlib

    mod = importlib.import_module(module)
    for old, new in NOTEBOOK_ALIASES[module].items():
        assert getattr(mod, old) is getattr(mod, new), f"{module}.{old} is not {module}.{new}"
