"""The split between the readable reference and the fast path, checked from the source.

* ``transformer_course`` (the reference the notebooks import) uses no threads, no ctypes and no
  in-place array tricks (``out=`` arguments, augmented assignment to an array or a slice of one);
* it never imports ``transformer_course_fast``; the fast package imports the reference;
* the modules' import graph (both packages) has no cycle;
* "models in their own floor": ``transformer_course``'s modules sit on floors (:data:`FLOORS`), and a
  module imports only from its own floor and those below it. The concept modules (one per concept)
  never import a model; the models are composed of them.
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


def import_graph(paths) -> dict[str, set[str]]:
    """module name -> the modules among ``paths`` it imports (read with ast: nothing is imported)."""
    modules = {module_name(p): p for p in paths}
    return {name: {m for m in imported_modules(path) if m in modules and m != name} for name, path in modules.items()}


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None when there is none."""
    state: dict[str, str] = {}

    def visit(name, trail):
        if state.get(name) == "done":
            return None
        if state.get(name) == "open":
            return trail[trail.index(name):] + [name]
        state[name] = "open"
        for other in sorted(graph.get(name, ())):
            found = visit(other, trail + [name])
            if found:
                return found
        state[name] = "done"
        return None

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return None


def test_import_graph_has_no_cycle():
    graph = import_graph(REFERENCE + FAST)
    # a package's __init__ imports its modules; a module importing its own package's __init__
    # would close a cycle, and is reported like any other
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    assert "transformer_course.multihead" in graph["transformer_course_fast.attention"]   # fast -> reference


# -- models in their own floor ------------------------------------------------------------------------------
# The floors of lib/transformer_course, lowest first. A module imports from its own floor and the floors
# below, never from one above: a concept is written once, before any model, and does not know the models.
FLOORS = {
    "checks": {"_checks"},
    # one module per concept (and torch_interop, which copies PyTorch's weights into the concept blocks)
    "concepts": {"softmax", "attention", "masks", "multihead", "positional", "normalization", "activations",
                 "feedforward", "encoder", "online_softmax", "kv_cache", "decoder_block", "loss", "generation",
                 "speculative", "backward", "quantization", "gguf_file", "safetensors_file", "torch_interop", "bpe",
                 "wordpiece"},
    # the models, composed of the concepts (a model may build on another: lora on llama, smollm2 on llama)
    "models": {"decoder", "llama", "smollm2", "smollm2_reference", "pretrained", "training", "lora"},
    # what the notebooks and the reader use on top: the exports, the tour, grading, figures, test helpers
    "front": {"__init__", "__main__", "grading", "plotting", "diagrams", "testing", "exercise_rule", "toy", "texts",
              "tokens_reference"},
}
# Models that compose no concept module, and why.
NOT_COMPOSED = {"smollm2_reference": "transformers' own SmolLM2, the independent reference: none of ours on purpose"}


def short_graph(graph: dict[str, set[str]], package: str = "transformer_course") -> dict[str, set[str]]:
    """The graph of one package with its modules' short names (``softmax``; the package itself ``__init__``)."""
    def short(name):
        return "__init__" if name == package else name[len(package) + 1:]
    inside = lambda name: name == package or name.startswith(package + ".")   # noqa: E731
    return {short(a): {short(b) for b in deps if inside(b)} for a, deps in graph.items() if inside(a)}


def floor_violations(graph: dict[str, set[str]], floors: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a floor above the importer's, and every module without exactly one floor."""
    level = {}
    problems = []
    for i, (floor, modules) in enumerate(floors.items()):
        for m in sorted(modules):
            if m in level:
                problems.append(f"{m} is on two floors")
            level[m] = (i, floor)
    problems += [f"{m} has no floor (add it to FLOORS)" for m in sorted(graph.keys() - level.keys())]
    problems += [f"FLOORS names {m}, which is no module" for m in sorted(level.keys() - graph.keys())]
    for importer in sorted(graph.keys() & level.keys()):
        for imported in sorted(graph[importer] & level.keys()):
            if level[imported][0] > level[importer][0]:
                problems.append(f"{importer} ({level[importer][1]}) imports {imported} ({level[imported][1]}), "
                                f"a floor above")
    return problems


def test_concept_modules_never_import_a_model():
    graph = short_graph(import_graph(REFERENCE))
    assert floor_violations(graph, FLOORS) == []


def test_every_model_is_composed_of_concept_modules():
    graph = short_graph(import_graph(REFERENCE))
    lonely = {m: sorted(graph[m]) for m in FLOORS["models"] - NOT_COMPOSED.keys()
              if not graph[m] & FLOORS["concepts"]}
    assert not lonely, f"models that import no concept module: {lonely}"
    assert NOT_COMPOSED.keys() <= FLOORS["models"]


def test_the_floor_checker_catches_a_planted_violation():
    """The checks above on graphs with a planted mistake: each must be reported."""
    real = short_graph(import_graph(REFERENCE))
    planted = {m: set(deps) for m, deps in real.items()}
    planted["softmax"].add("decoder")                                # a concept importing a model
    assert floor_violations(planted, FLOORS) == ["softmax (concepts) imports decoder (models), a floor above"]
    tiny = {"base": set(), "concept": {"base"}, "model": {"concept"}, "new": {"base"}}
    floors = {"checks": {"base"}, "concepts": {"concept"}, "models": {"model", "gone"}}
    assert floor_violations(tiny, floors) == ["new has no floor (add it to FLOORS)",
                                              "FLOORS names gone, which is no module"]
    tiny["base"].add("model")                                        # the lowest floor importing the top one
    assert "base (checks) imports model (models), a floor above" in floor_violations(tiny, floors)
    assert import_cycle(tiny) == ["base", "model", "concept", "base"]
    assert import_cycle({"a": {"b"}, "b": set()}) is None


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
