"""The copy of ``transformer_course`` that a sandboxed run imports.

Later notebooks import what earlier ones built from the course package, so the
package must be importable while grading -- but the functions that THIS
notebook asks the student to write must not be: importing the reference
instead of writing it would otherwise score full marks. The copy differs from
lib/transformer_course in three ways:

* every function or class that this notebook's hidden cases use as their
  reference, and every package function or class with the name of a function
  the notebook's solution cells define, keeps its name but raises
  ``NotImplementedError`` when called;
* ``grading/`` is replaced by grader/sandbox_grading.py: no case generators,
  no references, export only;
* it is byte-compiled, read-only, and the only copy the sandbox can see (the
  repository itself is not mounted there).
"""

from __future__ import annotations

import ast
import compileall
import inspect
import shutil
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent

STUB = (
    "raise NotImplementedError({msg!r})"
)


def reference_names(case_specs) -> set[tuple[str, str]]:
    """(module, name) of the package functions/classes that these cases' references call."""
    found: set[tuple[str, str]] = set()

    def visit(func, depth):
        if depth > 4 or not isinstance(func, types.FunctionType):
            return
        code = func.__code__
        names = set(code.co_names)
        stack = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        while stack:
            inner = stack.pop()
            names |= set(inner.co_names)
            stack.extend(c for c in inner.co_consts if isinstance(c, types.CodeType))
        for name in names:
            obj = func.__globals__.get(name)
            if obj is None:
                continue
            module = getattr(obj, "__module__", "") or ""
            if not module.startswith("transformer_course") or module.startswith("transformer_course.grading"):
                # helpers defined next to the cases (e.g. _sdpa_ref) are followed, not blocked
                if isinstance(obj, types.FunctionType) and module.startswith("transformer_course.grading"):
                    visit(obj, depth + 1)
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found.add((module, obj.__name__))

    for spec in case_specs:
        visit(spec.reference, 0)
    return found


def _stub_module(source: str, names: set[str], module: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            msg = (f"{module}.{node.name} is what this notebook asks you to write: the course's reference "
                   f"implementation is not available while grading. Write your own.")
            node.body = [ast.parse(STUB.format(msg=msg)).body[0]]
            node.decorator_list = []
        elif isinstance(node, ast.ClassDef) and node.name in names:
            msg = (f"{module}.{node.name} is what this notebook asks you to write: the course's reference "
                   f"implementation is not available while grading. Write your own.")
            init = ast.parse(f"def __init__(self, *args, **kwargs):\n    {STUB.format(msg=msg)}\n").body[0]
            node.body = [init]
            node.decorator_list = []
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def build_sandbox_package(package_dir: Path, dest: Path, blocked: set[tuple[str, str]]) -> Path:
    """Write the sandbox's copy of the package under ``dest`` (returns the folder to put on sys.path)."""
    package_dir = Path(package_dir)
    target = Path(dest) / package_dir.name
    if target.exists():
        shutil.rmtree(target)
    by_module: dict[str, set[str]] = {}
    for module, name in blocked:
        by_module.setdefault(module, set()).add(name)
    for src in sorted(package_dir.rglob("*.py")):
        rel = src.relative_to(package_dir)
        if rel.parts[0] == "grading" or "__pycache__" in rel.parts:
            continue
        module = ".".join((package_dir.name,) + rel.with_suffix("").parts)
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        text = src.read_text(encoding="utf-8")
        if module in by_module:
            text = _stub_module(text, by_module[module], module)
        out.write_text(text, encoding="utf-8")
    grading = target / "grading"
    grading.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "sandbox_grading.py", grading / "__init__.py")
    compileall.compile_dir(str(target), quiet=2, force=True)
    for path in [Path(dest), *Path(dest).rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return Path(dest)


def _package_modules(package_module):
    import importlib
    import pkgutil

    modules = [package_module]
    for info in pkgutil.walk_packages(package_module.__path__, package_module.__name__ + "."):
        if ".grading" in info.name:
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except Exception:  # noqa: BLE001 -- an optional module (e.g. torch interop) may not import
            continue
    return modules


def _built_by(assignment, package_module, modules) -> set[tuple[str, str]]:
    """Package functions/classes that an assignment has the student build (see the module docstring)."""
    from transformer_course.grading import CASES

    found = reference_names([CASES[c] for c in assignment.case_ids if c in CASES])
    solution_names = {n for names in assignment.solution_names.values() for n in names}
    for module in modules:
        for name in solution_names:
            obj = getattr(module, name, None)
            if obj is not None and (inspect.isfunction(obj) or inspect.isclass(obj)) \
                    and (obj.__module__ or "").startswith(package_module.__name__):
                found.add((obj.__module__, obj.__name__))
    return found


def blocked_for(assignment, package_module, earlier=()) -> set[tuple[str, str]]:
    """What the sandbox copy blocks for ``assignment``.

    Blocked: the package functions and classes this notebook has the student build --
    the ones its hidden cases use as references, and the ones named like a function
    its solution cells define -- except those an EARLIER notebook already had the
    student build (later notebooks may import what earlier ones built).
    """
    modules = _package_modules(package_module)
    blocked = _built_by(assignment, package_module, modules)
    for previous in earlier:
        blocked -= _built_by(previous, package_module, modules)
    return blocked
