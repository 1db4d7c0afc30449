"""Hidden tests must catch plausible wrong implementations, not only crashes.

For every notebook with a tests/mutants/<name>.py file, each mutant replaces
the named solution cells; then only the HIDDEN part of the test cells runs (the
visible asserts are dropped), in a fresh namespace, with a fresh grading seed.
At least one hidden test must fail. The unmodified solution must pass the same
procedure, so a failure is the mutant's fault. A mutants file may also list
ALTERNATIVES: correct implementations written differently, which must pass.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
MUTANT_FILES = sorted((ROOT / "tests" / "mutants").glob("[0-9][0-9]_*.py"))


def load_mutants(path, kind="MUTANTS"):
    spec = importlib.util.spec_from_file_location(f"mutants_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kind, {})


def hidden_only_program(name, replacements):
    """Setup cell, solution cells (some replaced), then the hidden blocks of the test cells."""
    nb = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    pieces = [code[0].source]                      # the notebook's imports and seeds
    n_hidden = 0
    for cell in code[1:]:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            pieces.append(replacements.get(meta["grade_id"], cell.source))
        elif meta.get("grade"):
            block = HIDDEN.search(cell.source)
            assert block, f"{name}: test cell {meta['grade_id']} has no hidden tests"
            pieces.append(("__hidden__", meta["grade_id"], block.group(1)))
            n_hidden += 1
    unknown = set(replacements) - {c.metadata.get("nbgrader", {}).get("grade_id") for c in code}
    assert not unknown, f"mutant names unknown solution cells {unknown}"
    assert n_hidden
    return pieces


def run_hidden(pieces, monkeypatch, seed):
    """Run the pieces; return the grade ids of the hidden blocks that failed."""
    monkeypatch.setenv("COURSE_GRADING_SEED", str(seed))
    namespace = {"__name__": "__main__"}
    failed = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):   # mutants overflow on purpose
        warnings.simplefilter("ignore")
        _run_pieces(pieces, namespace, failed)
    return failed


def _run_pieces(pieces, namespace, failed):
    for piece in pieces:
        if isinstance(piece, tuple):
            _, grade_id, source = piece
            try:
                exec(compile(source, grade_id, "exec"), namespace)
            except Exception:  # noqa: BLE001 -- any failure of a hidden test counts
                failed.append(grade_id)
        else:
            exec(compile(piece, "cell", "exec"), namespace)


CASES = [(path.stem, desc, repl) for path in MUTANT_FILES for desc, repl in load_mutants(path).items()]


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reference_solution_passes_hidden_tests(name, seed, monkeypatch):
    assert run_hidden(hidden_only_program(name, {}), monkeypatch, seed) == []


@pytest.mark.parametrize("name,description,replacements", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
@pytest.mark.parametrize("seed", [11, 12])
def test_hidden_tests_catch_mutant(name, description, replacements, seed, monkeypatch):
    failed = run_hidden(hidden_only_program(name, replacements), monkeypatch, seed)
    assert failed, f"{name}: the hidden tests accept a wrong implementation: {description}"


ALTERNATIVES = [(path.stem, desc, repl) for path in MUTANT_FILES
                for desc, repl in load_mutants(path, "ALTERNATIVES").items()]


@pytest.mark.parametrize("name,description,replacements", ALTERNATIVES, ids=[f"{c[0]}: {c[1]}" for c in ALTERNATIVES])
@pytest.mark.parametrize("seed", [21, 22])
def test_hidden_tests_accept_correct_alternative(name, description, replacements, seed, monkeypatch):
    failed = run_hidden(hidden_only_program(name, replacements), monkeypatch, seed)
    assert not failed, f"{name}: the hidden tests {failed} reject a correct implementation: {description}"
