"""The course pipeline: sources -> student release -> executed solutions.

Checks that every source notebook passes all its tests (hidden ones included),
that every released stub fails them, that the committed generated copies are
fresh, that sources carry no outputs and that solutions hold no errors.
(nbval re-executes solutions/ separately: see the Makefile's `test` target.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import course  # noqa: E402

NAMES = course.assignments()
pytestmark = pytest.mark.slow


def source(name):
    return ROOT / "notebooks" / name / f"{name}.ipynb"


def grade_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def test_the_course_has_its_notebooks_in_order():
    assert NAMES == ["01_attention", "02_scaling", "03_multihead", "04_positional_encoding",
                     "05_encoder_block", "06_failures", "07_pretrained_minilm", "09_llm"], NAMES


@pytest.mark.parametrize("name", NAMES)
def test_source_has_no_outputs(name):
    nb = nbformat.read(source(name), as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("name", NAMES)
def test_source_is_a_graded_nbgrader_notebook(name):
    nb = nbformat.read(source(name), as_version=4)
    meta = [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]
    solutions = [m for m in meta if m.get("solution") and not m.get("grade")]
    tests = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    written = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
    assert solutions, f"{name}: no student solution cell"
    assert tests and all("### BEGIN HIDDEN TESTS" in c.source for c in tests), \
        f"{name}: every autograded test cell needs hidden tests"
    assert written, f"{name}: no written question graded by hand"
    ids = [m["grade_id"] for m in meta]
    assert len(ids) == len(set(ids)), f"{name}: duplicate grade ids {ids}"


@pytest.mark.parametrize("name", NAMES)
def test_source_passes_every_test_including_hidden(name):
    from nbgrader.validator import Validator

    result = Validator().validate(str(source(name)))
    assert result == {}, f"{name}: the source (reference solution) fails its own tests: {json.dumps(result)[:2000]}"


@pytest.mark.parametrize("name", NAMES)
def test_stubs_fail_every_test_including_hidden(name, tmp_path):
    """The source with solutions replaced by stubs, hidden tests kept: every test cell must fail."""
    from nbgrader.preprocessors import ClearSolutions
    from nbgrader.validator import Validator

    nb = nbformat.read(source(name), as_version=4)
    nb, _ = ClearSolutions(code_stub={"python": "# YOUR CODE HERE\nraise NotImplementedError()"}).preprocess(nb, {})
    stubbed = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, stubbed)
    result = Validator(invert=True).validate(str(stubbed))
    assert "passed" not in result, f"{name}: test cells pass on the stubs: {result['passed']}"
    assert result == {}, result
    # and the released student version fails its visible tests too
    released = Validator(invert=True).validate(str(ROOT / "exercises" / name / f"{name}.ipynb"))
    assert released == {}, f"{name}: released stub passes tests: {released}"


@pytest.mark.parametrize("name", NAMES)
def test_solutions_have_no_error_outputs(name):
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    assert course.error_outputs(nb) == []
    unexecuted = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert not unexecuted, f"{name}: cells {unexecuted} of the solution were never executed"
    assert not any("execution" in c.metadata for c in nb.cells), "timing metadata left in solutions"
    text = json.dumps(nb)
    for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME"):
        assert marker not in text, f"{name}: solutions still contain {marker!r}"


@pytest.mark.parametrize("name", NAMES)
def test_exercises_raise_only_not_implemented(name, tmp_path):
    nb = nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", as_version=4)
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [(i, o["ename"]) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors, f"{name}: the student version ran without a single NotImplementedError"
    unexpected = [(i, e) for i, e in errors if e != "NotImplementedError"]
    assert not unexpected, f"{name}: cells raise errors other than NotImplementedError: {unexpected}"


@pytest.mark.parametrize("name", NAMES)
def test_committed_solutions_are_fresh(name):
    """The committed solution's cells are exactly what the source gives (nbval checks the outputs)."""
    expected = course.solution_notebook(source(name))
    committed = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    want = [(c.cell_type, c.source) for c in expected.cells]
    got = [(c.cell_type, c.source) for c in committed.cells]
    assert got == want, f"solutions/{name} is stale: run `make solutions`"


def test_committed_exercises_are_fresh(tmp_path):
    """Regenerate the student release in a scratch course folder and compare with exercises/."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    (tmp_path / ".nbgrader").mkdir()
    course.generate_assignments(NAMES, root=tmp_path)
    stale = []
    for name in NAMES:
        fresh = json.loads((tmp_path / "exercises" / name / f"{name}.ipynb").read_text())
        committed = json.loads((ROOT / "exercises" / name / f"{name}.ipynb").read_text())
        if fresh != committed:
            stale.append(name)
    assert not stale, f"exercises/ is stale for {stale}: run `make exercises`"
    extra = sorted(p.name for p in (ROOT / "exercises").iterdir() if p.is_dir() and p.name not in NAMES)
    assert not extra, f"exercises/ holds notebooks with no source: {extra}"


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_shared_files_are_fresh(folder):
    for name in course.SHARED_FILES:
        src = ROOT / "notebooks" / name
        if src.exists():
            copy = ROOT / folder / name
            assert copy.exists() and copy.read_bytes() == src.read_bytes(), \
                f"{folder}/{name} is stale: run `make`"


def test_merge_streams_joins_only_neighbouring_chunks_of_one_stream():
    out = nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell("print('a'); print('b')")
    cell.outputs = [out("stream", name="stdout", text="a\n"), out("stream", name="stdout", text="b\n"),
                    out("stream", name="stderr", text="warn\n"), out("stream", name="stdout", text="c\n"),
                    out("display_data", data={"text/plain": "x"}), out("stream", name="stdout", text="d\n")]
    nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    merged = course.merge_streams(nb).cells[0].outputs
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "a\nb\n"), ("stream", "stderr", "warn\n"), ("stream", "stdout", "c\n"),
        ("display_data", None, None), ("stream", "stdout", "d\n")]


@pytest.mark.parametrize("name", NAMES)
def test_committed_solutions_have_merged_streams(name):
    # Written through merge_streams, so rebuilding them does not change them just because the
    # kernel chunked a cell's printing differently.
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(nb.cells):
        kinds = [(o.output_type, o.get("name")) for o in cell.get("outputs", [])]
        assert all(not (a == b and a[0] == "stream") for a, b in zip(kinds, kinds[1:])), (name, i, kinds)
