"""The copy of the course's packages that a sandboxed run of notebook NN imports.

Later notebooks import what earlier ones built from the course package, so the
package must be importable while grading -- but nothing in it may compute what
THIS notebook asks the student to write. Blocking functions by name cannot be
complete (``flash_attention`` computes softmax: attention with zero scores, the
input as an additive mask and V = I), so the copy follows one rule that holds for
any notebook added later, whatever its modules are called:

1. **Only what the notebook imports.** The copy holds the package modules that the
   SOURCE notebook of NN imports (``from transformer_course import x``,
   ``from transformer_course.m import y``, ``import transformer_course as tc`` with
   the ``tc.x`` it uses), and the modules those import in turn -- nothing else. A
   module that notebook NN never imports (fast attention for notebook 01, a later
   notebook's module for an earlier one) does not exist in NN's sandbox; the
   package's ``__init__`` exports only the names whose module is there, and names
   the notebook for everything else.
2. **Not what the notebook asks for.** Within that copy, every public function or
   class named like a function the notebook's solution cells define (the exercises, and
   helpers a solution defines inside its function), and every package twin of an exercise
   under another name that the hidden cases declare (``TWINS``: ``multi_head_attention`` ->
   ``MultiHeadAttention``), keeps its name but raises ``NotImplementedError`` -- except what
   an EARLIER notebook had the student build, what NN's own solution cells call (both are
   given to the student), and what those functions need in turn (read from their source):
   the tools a solution uses work. An earlier notebook gives what its solution cells define, not what it only
   blocked as a twin (04's twin ``apply_rope`` is blocked again in 09, which asks for it). The hidden cases' references play no part: they may be
   written with any concept module (they run outside the sandbox, with the full package).
   Other cells that call this notebook's twin (a comparison cell) fail while grading,
   at no cost in points.
   **Nor the private helpers behind it.** A private function or class (a leading underscore, or
   in a private module such as ``_checks``) is blocked too when a blocked name reaches it (read
   from the source: :func:`calls`) and nothing the copy keeps working does -- walking the calls
   without entering a blocked name, from: the public functions and classes of the modules the
   notebook imports itself, the earlier notebooks' exercises, every course name the notebook's
   cells use (any import form, private ones included), and what the copied modules run when
   imported (top-level statements, decorators, defaults, base classes). ``MultiHeadAttention``
   and ``multi_head_attention`` are thin holders over ``multihead._project_attend_merge``:
   blocked in notebook 03 with them. A module that is in the copy only because another imports
   it (03's ``encoder``, through ``torch_interop``) keeps working only as far as those reach it:
   its ``encoder_block`` calls the same helper and fails in 03's sandbox. An argument check
   that the kept functions use stays; one that only the exercises use goes with them.
3. The hidden cases (the package ``transformer_course_cases``: generators and references)
   are never copied; ``transformer_course/grading.py``, the module the notebooks import
   ``hidden_case`` from, is replaced by grader/sandboxed/grading_module.py (export only).
   The copy is byte-compiled, read-only, and the only course code the
   sandbox can see (the repository is not mounted there).
4. **A copied module's data files come with it.** A file next to a copied module that the
   module names in a string constant (``Path(__file__).with_name("smollm2_reference.npz")``)
   is copied too, if it is not Python: a stored reference is part of the student's installed
   package already, and it cannot answer a hidden case, whose inputs are drawn at grading time.

Every top-level package in the course's ``lib/`` folder is course code for this rule
(a module moved into a package of its own is treated the same).
"""

from __future__ import annotations

import ast
import compileall
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from transformer_course.exercise_rule import absent_message, twin_message

HERE = Path(__file__).resolve().parent
SANDBOX_GRADING = HERE.parent / "sandboxed" / "grading_module.py"
CASES_PACKAGE = "transformer_course_cases"     # lib/transformer_course_cases: generators and references
RULE_MODULE = "transformer_course.exercise_rule"   # what an exercise may use (imported by testing; always copied)

STUB = "raise NotImplementedError({msg!r})"
MAGIC = re.compile(r"^[ \t]*[%!].*$", re.M)
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.[A-Za-z0-9]{1,10}")


# --------------------------------------------------------------------------- the course's modules
class CourseCode:
    """The modules of every package in ``lib/`` (by dotted name), read as source, never imported."""

    def __init__(self, lib_dir: Path):
        self.lib = Path(lib_dir)
        self.files: dict[str, Path] = {}
        self.packages = sorted(p.name for p in self.lib.iterdir()
                               if p.is_dir() and (p / "__init__.py").exists() and p.name.isidentifier())
        for pkg in self.packages:
            for src in sorted((self.lib / pkg).rglob("*.py")):
                rel = src.relative_to(self.lib)
                if "__pycache__" in rel.parts or any(not part.isidentifier() for part in rel.with_suffix("").parts):
                    continue
                name = ".".join(rel.with_suffix("").parts)
                self.files[name[: -len(".__init__")] if name.endswith(".__init__") else name] = src
        self._trees: dict[str, ast.Module] = {}
        self._scopes: dict[str, tuple[dict, dict]] = {}

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            self._trees[module] = ast.parse(self.files[module].read_text(encoding="utf-8"))
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def exports(self, package: str) -> dict[str, str]:
        """Names a package's __init__ re-exports -> the module that defines them."""
        out = {}
        for node in self.tree(package).body:
            if isinstance(node, ast.ImportFrom):
                target = self._resolve(package, node, package_init=True)
                if target in self.files:
                    for alias in node.names:
                        out[alias.asname or alias.name] = self.source_of(target, alias.name)
        return out

    def source_of(self, target: str, name: str) -> str:
        """The module that ``from target import name`` reads: the submodule ``name``, or ``target``."""
        return f"{target}.{name}" if f"{target}.{name}" in self.files else target

    def _resolve(self, module: str, node: ast.ImportFrom, package_init: bool = False) -> str | None:
        if node.level:
            base = module.split(".")
            if not (package_init or self.is_package(module)):
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            return ".".join(base + ([node.module] if node.module else []))
        return node.module

    def imports_of(self, module: str) -> set[str]:
        """The course modules that ``module`` imports (its own package's __init__ excluded)."""
        found = set()
        for node in ast.walk(self.tree(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found |= self._course_modules(alias.name)
            elif isinstance(node, ast.ImportFrom):
                target = self._resolve(module, node)
                if not target:
                    continue
                found |= self._course_modules(target)
                for alias in node.names:
                    if f"{target}.{alias.name}" in self.files:
                        found.add(f"{target}.{alias.name}")
        return {m for m in found if m not in self.packages}

    def _course_modules(self, dotted: str) -> set[str]:
        parts = dotted.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in self.files}

    def closure(self, modules: set[str]) -> set[str]:
        todo, seen = list(modules), set()
        while todo:
            m = todo.pop()
            if m in seen or m not in self.files or _is_grading(m):
                continue
            seen.add(m)
            todo.extend(self.imports_of(m))
        return seen


def _code_cells(assignment, kinds=None):
    for cell in assignment.cells:
        if cell.cell_type == "code" and (kinds is None or cell.kind in kinds):
            try:
                yield ast.parse(MAGIC.sub("", cell.source))
            except (SyntaxError, ValueError):
                continue


def notebook_imports(assignment, code: CourseCode) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """The course modules the SOURCE notebook imports; the course names it binds -> their module;
    its aliases of course packages (``tc`` -> ``transformer_course``)."""
    modules: set[str] = set()
    names: dict[str, str] = {}
    aliases: dict[str, str] = {}       # local alias -> package (import transformer_course as tc)
    trees = list(_code_cells(assignment))

    def name_in(package: str, attr: str, local: str | None = None) -> None:
        if f"{package}.{attr}" in code.files:
            modules.add(f"{package}.{attr}")
        elif attr in code.exports(package):
            modules.add(code.exports(package)[attr])
            names[local or attr] = code.exports(package)[attr]

    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if top in code.packages:
                        modules |= {m for m in code._course_modules(alias.name) if m not in code.packages}
                        if alias.asname and alias.name in code.packages:
                            aliases[alias.asname] = alias.name
                        elif not alias.asname:
                            aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and node.module.split(".")[0] in code.packages:
                if node.module in code.packages:
                    for alias in node.names:
                        if alias.name == "*":
                            for attr in code.exports(node.module):
                                name_in(node.module, attr)
                        else:
                            name_in(node.module, alias.name, alias.asname)
                elif node.module in code.files:
                    modules.add(node.module)
                    for alias in node.names:
                        names[alias.asname or alias.name] = node.module
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                name_in(aliases[node.value.id], node.attr)
    return {m for m in modules if not _is_grading(m)}, names, aliases


def solution_uses(assignment, names: dict[str, str], aliases: dict[str, str]) -> set[str]:
    """Course names that the notebook's own solution cells use (given to the student)."""
    used = set()
    for tree in _code_cells(assignment, kinds=("solution", "written")):
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in names:
                used.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                used.add(node.attr)
    return used


def _resolve_name(code: CourseCode, names: dict[str, str], aliases: dict[str, str], name: str):
    """(module, name) of a course name the notebook uses (through an import or ``tc.name``)."""
    module = names.get(name)
    if module is None:
        for package in set(aliases.values()):
            module = code.exports(package).get(name) if package in code.packages else None
            if module:
                break
    return (module, name) if module else None


def _scope(code: CourseCode, module: str) -> tuple[dict[str, object], dict[str, ast.AST]]:
    """A module's top level: local name -> (module, name) or a module's dotted name, for its course
    imports; name -> node, for its functions and classes."""
    if module in code._scopes:
        return code._scopes[module]
    imported: dict[str, object] = {}
    defs: dict[str, ast.AST] = {}
    for node in code.tree(module).body:
        if isinstance(node, ast.ImportFrom):
            target = code._resolve(module, node)
            if target not in code.files:
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{target}.{alias.name}" in code.files:
                    imported[local] = f"{target}.{alias.name}"
                elif code.is_package(target) and alias.name in code.exports(target):
                    imported[local] = (code.exports(target)[alias.name], alias.name)
                else:
                    imported[local] = (target, alias.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
    code._scopes[module] = imported, defs
    return imported, defs


def _refers_to(code: CourseCode, module: str, roots, own: str | None = None) -> set[tuple[str, str]]:
    """The course names (module, name) that the AST nodes ``roots`` of ``module`` refer to."""
    imported, defs = _scope(code, module)
    out = set()
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, ast.Name):
                if node.id in defs and node.id != own:
                    out.add((module, node.id))
                elif isinstance(imported.get(node.id), tuple):
                    out.add(imported[node.id])
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and isinstance(imported.get(node.value.id), str):
                out.add((imported[node.value.id], node.attr))
    return {(m, n) for m, n in out if m in code.files}


def calls(code: CourseCode, module: str, name: str) -> set[tuple[str, str]]:
    """The course functions/classes that ``module.name``'s source refers to (read, not run)."""
    defs = _scope(code, module)[1]
    return _refers_to(code, module, [defs[name]], own=name) if name in defs else set()


def import_time_refs(code: CourseCode, module: str) -> set[tuple[str, str]]:
    """What ``module`` runs when it is imported, even with some of its functions stubbed: its top-level
    statements other than imports and definitions (``ACTIVATIONS = {"relu": relu}``), and each
    definition's decorators, default values and base classes."""
    roots: list[ast.AST] = []
    for node in code.tree(module).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        elif isinstance(node, ast.ClassDef):
            roots += [*node.decorator_list, *node.bases, *node.keywords]
        elif not isinstance(node, (ast.Import, ast.ImportFrom)):
            roots.append(node)
    return _refers_to(code, module, roots)


def reached_from(code: CourseCode, start: set[tuple[str, str]], modules: set[str],
                 avoid: set[tuple[str, str]] = frozenset()) -> set[tuple[str, str]]:
    """Every course function/class that ``start`` refers to, directly or not, within ``modules``
    (never entering ``avoid``)."""
    seen, todo = set(), [s for s in start if s[0] in modules and s not in avoid]
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        todo.extend(c for c in calls(code, *item) if c[0] in modules and c not in seen and c not in avoid)
    return seen


def notebook_refs(assignment, code: CourseCode) -> set[tuple[str, str]]:
    """(module, name) of every course name the notebook's cells refer to, through any import form:
    ``from transformer_course.m import _x``, ``tc.m._x``, ``import transformer_course.m as m; m._x``."""
    refs: set[tuple[str, str]] = set()
    trees = list(_code_cells(assignment))
    bound: dict[str, str] = {}                 # local name -> course module or package it is bound to
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in code.packages:
                        if alias.asname:
                            bound[alias.asname] = alias.name
                        else:
                            bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module in code.files:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in code.files:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif alias.name != "*":
                        refs.add(_course_name(code, node.module, alias.name))
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if not (isinstance(base, ast.Name) and base.id in bound):
                continue
            module = bound[base.id]
            for part in chain:         # the longest module prefix; the next part is the name
                if f"{module}.{part}" not in code.files:
                    refs.add(_course_name(code, module, part))
                    break
                module = f"{module}.{part}"
    return {r for r in refs if r[0] in code.files}


def _course_name(code: CourseCode, module: str, name: str) -> tuple[str, str]:
    """(defining module, name) of ``module.name``: a package's re-export is read through to its module."""
    if code.is_package(module) and name in code.exports(module):
        return code.exports(module)[name], name
    return module, name


def _is_grading(module: str) -> bool:
    """The hidden cases' package, and a package's ``grading`` module (what notebooks import it by)."""
    parts = module.split(".")
    return parts[0] == CASES_PACKAGE or (len(parts) == 2 and parts[1] == "grading")


# --------------------------------------------------------------------------- what is blocked
def _private(module: str, name: str) -> bool:
    return name.startswith("_") or any(part.startswith("_") for part in module.split("."))


def asked_names(assignment) -> set[str]:
    """What an assignment has the student write: the names its solution cells define (the exercises,
    and helpers a solution defines inside its function), and each exercise's package twins under
    another name, as the hidden cases declare them (``TWINS`` in transformer_course_cases)."""
    from transformer_course_cases import TWINS

    names = {n for defined in assignment.solution_names.values() for n in defined}
    # Helpers a solution defines inside its function count too: a stub whose answer splits into
    # document_windows + max_context_owner must not find the package's versions of those.
    names |= {node.name for tree in _code_cells(assignment, kinds=("solution",)) for node in ast.walk(tree)
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names | {twin for name in names for twin in TWINS.get(name, ())}


def _built_by(assignment, code: CourseCode) -> set[tuple[str, str]]:
    """(module, name) of the public course functions/classes that compute what an assignment asks for:
    those named like its exercises or their declared twins (:func:`asked_names`). What the hidden
    cases' references use plays no part: a reference may be written with any concept module."""
    asked = asked_names(assignment)
    found = set()
    for module in code.files:
        if _is_grading(module) or module.endswith("__main__"):
            continue
        for node in code.tree(module).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name in asked and not _private(module, node.name):
                found.add((module, node.name))
    return found


def _definitions(code: CourseCode, module: str) -> set[tuple[str, str]]:
    return {(module, name) for name in _scope(code, module)[1]}


def private_behind(code: CourseCode, blocked: set[tuple[str, str]], modules: set[str],
                   keep: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The private functions/classes of ``modules`` that a blocked name reaches and ``keep`` does not
    (walking the call graph without entering a blocked name). ``MultiHeadAttention`` and
    ``multi_head_attention`` are thin holders over ``_project_attend_merge``: blocking them alone
    would leave the answer one private name away."""
    behind = {item for item in reached_from(code, blocked, modules) - blocked
              if _private(*item) and item in _definitions(code, item[0])}
    return behind - reached_from(code, set(keep) - blocked, modules, avoid=blocked) if behind else set()


@dataclass
class PackagePlan:
    """What notebook NN's sandbox gets of the course's packages."""

    modules: set[str]                                  # copied (with the packages' __init__)
    blocked: set[tuple[str, str]]                      # (module, name) that raise NotImplementedError
    absent: set[str] = field(default_factory=set)      # course modules left out
    unavailable: set[str] = field(default_factory=set)  # names the packages export from left-out modules

    @property
    def blocked_names(self) -> set[str]:
        return {name for _, name in self.blocked}


def plan_for(assignment, lib_dir: Path, earlier=()) -> PackagePlan:
    """The rule of the module docstring, applied to ``assignment`` (earlier notebooks: ``earlier``)."""
    code = CourseCode(lib_dir)
    imported, names, aliases = notebook_imports(assignment, code)
    modules = code.closure(imported | ({RULE_MODULE} & set(code.files)))   # the rule's module: every copy
    modules |= {p for p in code.packages if any(m == p or m.startswith(p + ".") for m in modules)}
    for m in list(modules):                              # parents of nested modules
        parts = m.split(".")
        modules |= {".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in code.files}
    blocked = _built_by(assignment, code)
    given_before = {item for previous in earlier for item in _built_by(previous, code)}
    # An earlier notebook gives what the student wrote there. What it only blocked as a twin the student never
    # wrote: it stays blocked where a later notebook asks for it (04 blocked apply_rope and rope_tables as twins
    # of positional_encoding; 09 asks for apply_rope, with rope_tables as its twin).
    # And what this notebook asks for again is this notebook's exercise: 10 asks for 02's softmax_backward again
    # (the student may copy their own), so the package's stays blocked in 10.
    asked = asked_names(assignment)
    given_before = {(m, n) for m, n in given_before if n not in asked}
    blocked -= given_before
    given = solution_uses(assignment, names, aliases)
    blocked = {(m, n) for m, n in blocked if m in modules and n not in given}
    # The tools the solution uses must work: what they need in turn (read from their source) is not blocked.
    tools = {_resolve_name(code, names, aliases, n) for n in given}
    blocked -= reached_from(code, {t for t in tools if t is not None and t not in blocked}, modules)
    # A private helper that only blocked names reach is blocked too (rule 2, last part): kept working is
    # the public API of the modules the notebook imports itself, the earlier notebooks' exercises, every
    # course name the notebook's cells use, and what the copied modules run when imported.
    keep = {item for m in imported for item in _definitions(code, m) if not _private(*item)}
    keep |= {item for item in given_before if item[0] in modules}
    keep |= notebook_refs(assignment, code) | {t for t in tools if t is not None}
    keep |= {ref for m in modules for ref in import_time_refs(code, m)}
    blocked |= private_behind(code, blocked, modules, keep)
    absent = {m for m in code.files if m not in modules and not _is_grading(m)}
    unavailable = {name for pkg in code.packages if not _is_grading(pkg)
                   for name, m in code.exports(pkg).items() if m in absent}
    return PackagePlan(modules, blocked, absent, unavailable)


def _stub_module(source: str, names: set[str], module: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            msg = twin_message(module, node.name, _private(module, node.name))    # the rule's own words
            if isinstance(node, ast.ClassDef):
                node.body = [ast.parse(f"def __init__(self, *args, **kwargs):\n    {STUB.format(msg=msg)}\n").body[0]]
            else:
                node.body = [ast.parse(STUB.format(msg=msg)).body[0]]
            node.decorator_list = []
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _package_init(code: CourseCode, package: str, modules: set[str], notebook: str) -> str:
    """A package's __init__ with the re-exports of left-out modules removed, and a clear error for them."""
    tree = code.tree(package)
    body, dropped = [], []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            target = code._resolve(package, node, package_init=True)
            if target in code.files:          # keep each name whose module is in the copy
                keep = [a for a in node.names if code.source_of(target, a.name) in modules]
                dropped.extend(a.asname or a.name for a in node.names if a not in keep)
                if not keep:
                    continue
                node.names = keep
        body.append(node)
    kept = []
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            node.value.elts = [e for e in node.value.elts
                               if not (isinstance(e, ast.Constant) and e.value in dropped)]
        kept.append(node)
    tree.body = kept
    message = absent_message(f"{package}.{{name}}", notebook)
    tail = (f"\n\ndef __getattr__(name):\n"
            f"    raise AttributeError(f{message!r})\n")
    return ast.unparse(ast.fix_missing_locations(tree)) + tail


def data_files(code: CourseCode, module: str) -> list[Path]:
    """Non-Python files next to ``module`` that its source names in a string constant (rule 4)."""
    folder = code.files[module].parent
    named = {node.value for node in ast.walk(code.tree(module))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and FILE_NAME.fullmatch(node.value)}
    return sorted(folder / name for name in named
                  if (folder / name).is_file() and not name.endswith((".py", ".pyc")))


def build_sandbox_package(lib_dir: Path, dest: Path, plan: PackagePlan, notebook: str) -> Path:
    """Write the sandbox's copy of the course packages under ``dest`` (the folder to put on sys.path)."""
    code = CourseCode(lib_dir)
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    by_module: dict[str, set[str]] = {}
    for module, name in plan.blocked:
        by_module.setdefault(module, set()).add(name)
    for module in sorted(plan.modules):
        src = code.files[module]
        out = dest / src.relative_to(code.lib)
        out.parent.mkdir(parents=True, exist_ok=True)
        if code.is_package(module):
            text = _package_init(code, module, plan.modules, notebook)
        else:
            text = src.read_text(encoding="utf-8")
        if module in by_module:
            text = _stub_module(text, by_module[module], module)
        out.write_text(text, encoding="utf-8")
        for data in data_files(code, module):
            shutil.copyfile(data, out.parent / data.name)
    for package in code.packages:
        if f"{package}.grading" in code.files and package in plan.modules:
            grading = dest / code.files[f"{package}.grading"].relative_to(code.lib)   # grading.py or grading/__init__.py
            grading.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SANDBOX_GRADING, grading)
    compileall.compile_dir(str(dest), quiet=2, force=True)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


# --------------------------------------------------------------------------- the rule table (for Validate)
def rule_table(course_root: Path) -> dict:
    """What the student's kernel needs to apply the rule the grader applies (transformer_course/exercise_rule.py):
    per notebook, the names its solution cells define (the exercises it wraps), the course modules of the
    grader's copy, what is blocked in them, and the data distributions that come with them."""
    from transformer_course.exercise_rule import data_for
    from transformer_course_cases import CASES

    from . import notebooks

    root = Path(course_root)
    source, release, lib = root / "notebooks", root / "exercises", root / "lib"
    names = sorted(p.name for p in source.iterdir()
                   if p.is_dir() and p.name[:2].isdigit() and (p / f"{p.name}.ipynb").exists())
    loaded = {n: notebooks.load_assignment(source, n, CASES, release if (release / n).exists() else None)
              for n in names}
    table = {"packages": CourseCode(lib).packages, "notebooks": {}}
    for name in names:
        plan = plan_for(loaded[name], lib, [loaded[e] for e in names if e < name])
        blocked: dict[str, list[str]] = {}
        for module, item in sorted(plan.blocked):
            blocked.setdefault(module, []).append(item)
        table["notebooks"][name] = {
            "exercises": sorted({n for defined in loaded[name].solution_names.values() for n in defined}),
            "modules": sorted(plan.modules), "blocked": blocked, "data": data_for(plan.modules)}
    return table


def rule_text(course_root: Path) -> str:
    """``exercise_rule.json`` as written: one line per notebook, so a change shows as a small diff."""
    table = rule_table(course_root)
    lines = ["{", f' "packages": {json.dumps(table["packages"])},', ' "notebooks": {']
    items = list(table["notebooks"].items())
    for i, (name, entry) in enumerate(items):
        lines.append(f"  {json.dumps(name)}: {json.dumps(entry, sort_keys=True)}" + ("," if i < len(items) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
