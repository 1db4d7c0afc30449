"""Hidden tests must catch plausible wrong implementations, not only crashes.

For every notebook with a tests/mutants/<name>.py file, each mutant replaces
the named solution cells; then only the HIDDEN part of the test cells runs (the
visible asserts are dropped), in a fresh namespace, with a fresh grading seed.
At least one hidden test must fail. The unmodified solution must pass the same
procedure, so a failure is the mutant's fault. A mutants file may also list
ALTERNATIVES: correct implementations written differently, which must pass.

For the notebooks of EVERY_SEED (08-11) the measure is stricter and runs over
KILL_SEEDS grading seeds: a mutant must fail a hidden block of its OWN exercise
(the test cells after the replaced solution cell) on every one of those seeds,
and every alternative must pass them all (``surviving_seeds``; tests/mutant_kills.py
prints the table, e.g. over more seeds or for the independent solutions).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
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


# ------------------------------------------------------------------ one exercise's hidden blocks, many seeds
EVERY_SEED = {"08_decoder", "09_llm", "10_learning", "11_finetune"}
KILL_SEEDS = range(1000, 1020)


def solution_ids(name):
    """The grade ids of the notebook's solution cells (not the test cells), in order."""
    nb = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("solution") and not c.metadata["nbgrader"].get("grade")]


def own_blocks(name, pieces, exercises):
    """The hidden blocks of the test cells that follow the given solution cells (before the next solution cell)."""
    ids = iter(solution_ids(name))
    owner, out = None, []
    for piece in pieces[1:]:                          # pieces[0] is the set-up cell
        if isinstance(piece, tuple):
            if owner in exercises:
                out.append(piece)
        else:
            owner = next(ids)
    return out


def surviving_seeds(name, replacements, seeds):
    """The seeds on which every hidden block of the replaced exercises (all of them when none is
    replaced) passes: the set-up and solution cells run once, then each seed (COURSE_GRADING_SEED)
    draws fresh inputs for those blocks, checked by the same HiddenCase.check as always."""
    pieces = hidden_only_program(name, replacements)
    blocks = own_blocks(name, pieces, set(replacements) or set(solution_ids(name)))
    assert blocks, f"{name}: no hidden block for {sorted(replacements)}"
    namespace = {"__name__": "__main__"}
    survived = []
    old = os.environ.get("COURSE_GRADING_SEED")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            for piece in pieces:
                if not isinstance(piece, tuple):
                    exec(compile(piece, "cell", "exec"), namespace)
            for seed in seeds:
                os.environ["COURSE_GRADING_SEED"] = str(seed)
                failed = []
                for block in blocks:
                    _run_pieces([block], namespace, failed)
                    if failed:
                        break
                if not failed:
                    survived.append(seed)
    finally:
        if old is None:
            os.environ.pop("COURSE_GRADING_SEED", None)
        else:
            os.environ["COURSE_GRADING_SEED"] = old
    return survived


CASES = [(path.stem, desc, repl) for path in MUTANT_FILES for desc, repl in load_mutants(path).items()]


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reference_solution_passes_hidden_tests(name, seed, monkeypatch):
    assert run_hidden(hidden_only_program(name, {}), monkeypatch, seed) == []


SOME = [c for c in CASES if c[0] not in EVERY_SEED]
EVERY = [c for c in CASES if c[0] in EVERY_SEED]


@pytest.mark.parametrize("name,description,replacements", SOME, ids=[f"{c[0]}: {c[1]}" for c in SOME])
@pytest.mark.parametrize("seed", [11, 12])
def test_hidden_tests_catch_mutant(name, description, replacements, seed, monkeypatch):
    failed = run_hidden(hidden_only_program(name, replacements), monkeypatch, seed)
    assert failed, f"{name}: the hidden tests accept a wrong implementation: {description}"


@pytest.mark.parametrize("name,description,replacements", EVERY, ids=[f"{c[0]}: {c[1]}" for c in EVERY])
def test_hidden_tests_catch_mutant_on_every_seed(name, description, replacements):
    survived = surviving_seeds(name, replacements, KILL_SEEDS)
    assert not survived, (f"{name}: the hidden tests of the exercise accept a wrong implementation on "
                          f"{len(survived)} of {len(KILL_SEEDS)} seeds {survived}: {description}")


ALTERNATIVES = [(path.stem, desc, repl) for path in MUTANT_FILES
                for desc, repl in load_mutants(path, "ALTERNATIVES").items()]
SOME_ALT = [c for c in ALTERNATIVES if c[0] not in EVERY_SEED]
EVERY_ALT = [c for c in ALTERNATIVES if c[0] in EVERY_SEED]


@pytest.mark.parametrize("name,description,replacements", SOME_ALT, ids=[f"{c[0]}: {c[1]}" for c in SOME_ALT])
@pytest.mark.parametrize("seed", [21, 22])
def test_hidden_tests_accept_correct_alternative(name, description, replacements, seed, monkeypatch):
    failed = run_hidden(hidden_only_program(name, replacements), monkeypatch, seed)
    assert not failed, f"{name}: the hidden tests {failed} reject a correct implementation: {description}"


@pytest.mark.parametrize("name,description,replacements", EVERY_ALT, ids=[f"{c[0]}: {c[1]}" for c in EVERY_ALT])
def test_hidden_tests_accept_correct_alternative_on_every_seed(name, description, replacements):
    survived = surviving_seeds(name, replacements, KILL_SEEDS)
    rejected = sorted(set(KILL_SEEDS) - set(survived))
    assert not rejected, (f"{name}: the hidden tests reject a correct implementation on {len(rejected)} of "
                          f"{len(KILL_SEEDS)} seeds {rejected}: {description}")


def test_own_blocks_are_the_test_cells_of_the_exercise():
    """The every-seed measure runs the right cells: 08's sample_next_token owns exactly its test cell."""
    pieces = hidden_only_program("08_decoder", {})
    assert [b[1] for b in own_blocks("08_decoder", pieces, {"sample_next_token"})] == ["test_sample_next_token"]
    assert [b[1] for b in own_blocks("10_learning", hidden_only_program("10_learning", {}), {"softmax_backward",
            "embedding_backward"})] == ["test_softmax_backward", "test_embedding_backward"]
    # and a mutant that breaks its exercise on every seed is reported on every seed
    broken = {"softmax_backward": "def softmax_backward(p, g):\n    return p * g\n"}
    assert surviving_seeds("10_learning", broken, range(3)) == []
    assert surviving_seeds("10_learning", {}, range(3)) == [0, 1, 2]
