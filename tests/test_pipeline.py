"""The course pipeline: sources -> student release -> executed solutions.

Checks that the released notebook, filled with the course's solutions, validates as a student runs
Validate; that every released stub fails its test cell on Run All; that the committed generated copies
are fresh, that sources carry no outputs and that solutions hold no errors. (The hidden tests on the
reference solutions: tests/test_grader_correct.py, through the real grader.)
(nbval re-executes solutions/ separately: see the Makefile's `test` target.)
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))
import course  # noqa: E402
import exercise_checks  # noqa: E402
from test_exercises_teach import KNOWN_FAILING_SNIPPETS  # noqa: E402

NAMES = course.assignments()
pytestmark = pytest.mark.slow


def source(name):
    return ROOT / "notebooks" / name / f"{name}.ipynb"


def grade_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def test_the_course_has_its_notebooks_in_order():
    assert NAMES == ["01_attention", "02_scaling", "03_multihead", "04_positional_encoding",
                     "05_encoder_block", "06_failures", "07_pretrained_minilm", "08_decoder", "09_llm", "10_learning", "11_finetune",
                     "12_tokens"], NAMES


def test_the_hub_assigns_every_notebook():
    """The hub's setup_course releases, collects and grades every exercises/NN_* (12 included) as an assignment."""
    sys.path.insert(0, str(ROOT / "hub"))
    import hubctl

    assert hubctl.all_assignments() == NAMES
    assert hubctl.Class(instructors=["ada"], students=["bo"], exchange=Path("/x")).assignments == NAMES


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


# The source's reference solutions passing the hidden tests is what the real grader checks for every notebook
# (tests/test_grader_correct.py: the correctly filled release, hidden tests drawn at grading time, in the sandbox;
# tests/test_hidden_tests_catch_mutants.py: the reference and the correct alternatives on 20 seeds, in-process);
# the stubs failing every test cell is checked on the release itself (test_exercises_run_all_past_the_stubs: a
# stub fails the cell's visible part, so hidden tests after it add nothing). Neither executes the source again here.


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


STUB_MESSAGE = "not written yet: replace this line with your code"


@pytest.mark.parametrize("name", NAMES)
def test_exercises_run_all_past_the_stubs(name, tmp_path):
    """Run All on the untouched student version, the way Jupyter runs it: a cell that errors stops
    the run unless it is tagged `raises-exception`. Every cell must run; the only errors are the
    stubs' own NotImplementedError with the message that says what to do; and every visible test
    cell of the release fails (what nbgrader's Validate, inverted, would say of the untouched stubs)."""
    nb = nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", as_version=4)
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False, config=course.kernel_config(),
                   resources={"metadata": {"path": str(tmp_path)}}).execute()   # raises at an untagged error
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{name}: Run All stopped early"
    errors = [(i, o["ename"], o["evalue"]) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors, f"{name}: the student version ran without a single NotImplementedError"
    unexpected = [(i, e, v[:80]) for i, e, v in errors if e != "NotImplementedError" or STUB_MESSAGE not in v]
    assert not unexpected, f"{name}: errors other than the stubs' NotImplementedError: {unexpected}"
    tests_run = [c for c in code if c.metadata.get("nbgrader", {}).get("grade")]
    assert all(any(o.get("output_type") == "error" for o in c.outputs) for c in tests_run), \
        f"{name}: a visible test cell did not fail on the stubs"


def test_run_all_tags_follow_the_data_flow():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("def f(a):\n    raise NotImplementedError()",
                                  metadata={"nbgrader": {"solution": True, "grade": False}}),
        nbformat.v4.new_code_cell("y = f(x)"),                 # calls the stub
        nbformat.v4.new_code_cell("%matplotlib inline\nz = y + 1"),   # uses its result
        nbformat.v4.new_code_cell("y = 2\nprint(x)"),          # rebinds y from clean code
        nbformat.v4.new_code_cell("print(y, x)"),               # clean again
    ])
    assert course.tag_cells_that_run_student_code(nb) == [2, 3]
    assert nb.cells[2].metadata["tags"] == ["raises-exception"]


def filled_release(name):
    """The released exercise with the course's solutions typed into the student cells (code and
    written answers), as a student who got everything right would hand it in."""
    strip = {"code": course.SOLUTION_MARKER, "markdown": course.MARK_SCHEME}   # markers, mark schemes
    solutions = {c.metadata["nbgrader"]["grade_id"]: strip[c.cell_type].sub("", c.source).rstrip("\n")
                 for c in nbformat.read(source(name), as_version=4).cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", as_version=4)
    filled = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = solutions[meta["grade_id"]]
            filled += 1
        elif course.SCRATCH in cell.metadata.get("tags", []):      # a written question's scratch cell, used
            cell.source += "\nprint('a trial computation for the written question')"
    assert filled == len(solutions), (name, filled, sorted(solutions))
    return nb


def _config_outside_the_course(home: Path) -> dict:
    """The environment of a student who validates in a folder of their own: no course
    nbgrader_config.py in Jupyter's config paths (nbgrader reads one from there and from the working
    folder, where the release's own, kernel settings only, sits beside the notebook), so nbgrader's
    defaults hold (30 s per cell, interrupt on timeout)."""
    env = dict(os.environ, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"))
    env.pop("JUPYTER_CONFIG_PATH", None)
    from jupyter_core.paths import jupyter_config_path

    for folder in jupyter_config_path():
        found = Path(folder) / "nbgrader_config.py"
        if folder.startswith(str(home)):
            continue
        assert not found.exists(), f"{found} would configure nbgrader for every student: not the defaults"
    return env


@pytest.mark.parametrize("name", NAMES)
def test_a_correctly_filled_release_validates(name, tmp_path):
    """What nbgrader's Validate tells a student who solved everything, run as a student runs it (and, appended to it,
    every snippet the notebook's text suggests to run, which must run): the
    released notebook with the solutions typed in, `nbgrader validate` in a folder outside the course,
    nbgrader's default configuration (30 s per cell). It must say Success, with no cell interrupted
    or timed out on the way (nbgrader interrupts such a cell, goes on and still says Success unless a
    graded cell failed), and no "partial credit" (a test cell whose last line has a value shows it as a
    partial score)."""
    folder = tmp_path / "my work"
    folder.mkdir()
    path = folder / f"{name}.ipynb"
    nbformat.write(filled_release(name), path)
    shutil.copyfile(ROOT / "exercises" / name / "nbgrader_config.py", folder / "nbgrader_config.py")   # as released
    assert ROOT not in path.parents
    report = tmp_path / "snippets.jsonl"
    nb = nbformat.read(path, as_version=4)
    snippets = exercise_checks.add_reporting_snippet_cells(nb, report)   # at the end, ungraded: Validate ignores them
    nbformat.write(nb, path)
    proc = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "validate", path.name],
                          cwd=folder, env=_config_outside_the_course(tmp_path), capture_output=True, text=True,
                          timeout=1800)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    for sign in ("Timeout waiting for execute reply", "Interrupting kernel", "CellTimeoutError", "timed out"):
        assert sign not in said, f"{name}: a cell ran past nbgrader's default 30 s under validate:\n{said[-3000:]}"
    assert "Success! Your notebook passes all the tests." in proc.stdout, \
        f"{name}: Validate fails on a correct submission:\n{said[-3000:]}"
    noise = [line for line in said.splitlines()
             if "WARNING" in line or "over TCP" in line or "[ValidateApp | INFO]" in line]   # issue 39's trials
    assert not noise, f"{name}: Validate prints warnings a student does not need (issue 39):\n" + "\n".join(noise)
    # In the same kernel, once the notebook has run: every snippet its text suggests to run (`%timeit f(x)`,
    # "evaluate `0.0 * np.log(0.0)`": tools/exercise_checks.py) runs as written.
    failed = exercise_checks.reported_snippet_failures(name, report)
    if name in KNOWN_FAILING_SNIPPETS:                         # strict: a fixed notebook must leave the list
        assert failed, f"{name}: every suggested snippet runs now: remove it from KNOWN_FAILING_SNIPPETS"
        pytest.xfail(f"issue 28 part B: {failed}")
    assert not failed, f"{name}: snippets the text suggests fail ({len(snippets)} suggested):\n" + "\n".join(failed)


@pytest.mark.parametrize("name", NAMES)
def test_no_visible_test_cell_ends_in_a_value(name):
    """nbgrader reads an `Out:` value of a test cell as a partial score (0.0 from a helper that
    returns a number means 0 points): the last statement must be a statement, a print or a
    call of a helper that returns None."""
    from IPython.core.inputtransformer2 import TransformerManager

    none_returning = {"print", "assert_close", "display"}
    bad = []
    for i, cell in enumerate(nbformat.read(source(name), as_version=4).cells):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            visible = course.HIDDEN_BLOCK.sub("", cell.source)
            last = ast.parse(TransformerManager().transform_cell(visible)).body[-1]
            if isinstance(last, ast.Expr) and not (
                    isinstance(last.value, ast.Call) and getattr(last.value.func, "id", None) in none_returning):
                bad.append((i, ast.unparse(last)[:60]))
    assert not bad, f"{name}: test cells end in an expression with a value: {bad}"
    from transformer_course.testing import assert_close
    assert assert_close([1.0], [1.0], quiet=True) is None


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
        course.finish_release(tmp_path / "exercises" / name / f"{name}.ipynb")
        fresh = json.loads((tmp_path / "exercises" / name / f"{name}.ipynb").read_text())
        committed = json.loads((ROOT / "exercises" / name / f"{name}.ipynb").read_text())
        if fresh != committed:
            stale.append(name)
    assert not stale, f"exercises/ is stale for {stale}: run `make exercises`"
    configs = [ROOT / "exercises" / "nbgrader_config.py"] + [ROOT / "exercises" / n / "nbgrader_config.py" for n in NAMES]
    stale = [str(p.relative_to(ROOT)) for p in configs
             if not p.exists() or p.read_text(encoding="utf-8") != course.STUDENT_CONFIG]
    assert not stale, f"the student's nbgrader_config.py is missing or stale: {stale}: run `make exercises`"
    extra = sorted(p.name for p in (ROOT / "exercises").iterdir() if p.is_dir() and p.name not in NAMES)
    assert not extra, f"exercises/ holds notebooks with no source: {extra}"


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_shared_files_are_fresh(folder):
    for name in course.SHARED_FILES:
        src = ROOT / "notebooks" / name
        if src.exists():
            copy = ROOT / folder / name
            text = src.read_text(encoding="utf-8")
            want = course.student_text(name, text) if folder == "exercises" else text
            assert copy.exists() and copy.read_text(encoding="utf-8") == want, \
                f"{folder}/{name} is stale: run `make`"


def test_student_theory_leaves_out_the_answers_and_keeps_every_heading():
    """theory.md's answer blocks (<details> "after notebook NN") hide nothing in a text editor: the student
    release keeps their summaries as one plain line saying what is withheld (no collapsed block holding only a
    placeholder), not their bodies; headings (the notebooks' link targets) all stay."""
    full = (ROOT / "notebooks" / "theory.md").read_text(encoding="utf-8")
    student = course.student_text("theory.md", full)
    blocks = course.ANSWER_BLOCK.findall(full)
    assert blocks, "theory.md has no answer blocks: the rule has nothing to do (did their summaries change?)"
    for summary, nb, body, _ in blocks:
        said = re.sub(r"<[^>]+>", "", summary).strip()
        assert f"Withheld from the student release: “{said}”" in student, f"the student theory lost the summary {said!r}"
        for line in (ln.strip() for ln in body.splitlines()):
            if len(line) > 40:
                assert line not in student, f"notebook {nb}'s answer block is in the student theory: {line[:80]!r}"
    assert not course.ANSWER_BLOCK.search(student), "a collapsed answer block (a placeholder) is left in the student theory"
    headings = lambda t: [ln for ln in t.splitlines() if ln.startswith("#")]  # noqa: E731
    assert headings(student) == headings(full), "the student theory must keep every heading"
    planted = "<details><summary>The trick (after notebook 07, Exercise 1)</summary>\n\nx = y + 1 is the answer.\n</details>"
    assert "x = y + 1" not in course.student_text("theory.md", planted)
    assert course.student_text("other.md", planted) == planted


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


def _png(pixels):
    import base64
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _committed_figure():
    import base64
    import io

    import numpy as np
    from PIL import Image

    nb = nbformat.read(ROOT / "solutions" / NAMES[0] / f"{NAMES[0]}.ipynb", as_version=4)
    png = next(o.data["image/png"] for c in nb.cells if c.cell_type == "code"
               for o in c.outputs if "image/png" in o.get("data", {}))
    return png, np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGBA"))


def test_same_picture_accepts_antialiasing_noise_and_nothing_more():
    import numpy as np

    png, pixels = _committed_figure()                                  # (height, width, 4)
    assert course.same_picture(png, png)
    rng = np.random.default_rng(0)
    h, w, _ = pixels.shape
    noisy = pixels.astype(int)
    rows, cols = np.unravel_index(rng.choice(h * w, 60, replace=False), (h, w))
    noisy[rows, cols, :3] += np.where(noisy[rows, cols, :3] >= 4, -4, 4)  # 60 pixels, 4 levels (measured: 07)
    assert (np.abs(noisy - pixels).max(axis=-1) == 4).sum() == 60
    assert course.same_picture(png, _png(noisy))
    moved = pixels.copy()
    moved[h // 2:h // 2 + 6, w // 4:w // 4 + 60, :3] = 255 - moved[h // 2:h // 2 + 6, w // 4:w // 4 + 60, :3]
    assert not course.same_picture(png, _png(moved))                   # a bar that moved: 360 pixels
    spread = pixels.astype(int)
    spread[::2, ::2, :3] += np.where(spread[::2, ::2, :3] >= 1, -1, 1)  # a quarter of the image, 1 level
    assert not course.same_picture(png, _png(spread))
    one_level_off = pixels.astype(int)
    one_level_off[0, 0, :3] = (one_level_off[0, 0, :3] + course.PICTURE_MAX_LEVELS + 1) % 256
    assert not course.same_picture(png, _png(one_level_off))           # one pixel far off
    assert not course.same_picture(png, _png(pixels[:-1]))             # another size


def test_keep_unchanged_figures_keeps_only_same_pictures_in_unchanged_cells():
    import numpy as np

    png, pixels = _committed_figure()
    near = pixels.astype(int)
    near[5, 5, 0] += 1 if near[5, 5, 0] < 255 else -1                   # one pixel, one level
    far = 255 - pixels
    out = nbformat.v4.new_output

    def notebook(*figures, text="ratio 0.5\n"):
        cells = [nbformat.v4.new_code_cell(f"plot({i})") for i in range(len(figures))]
        for cell, fig in zip(cells, figures):
            cell.outputs = [out("stream", name="stdout", text=text),
                            out("display_data", data={"image/png": fig, "text/plain": "<Figure>"})]
        return nbformat.v4.new_notebook(cells=cells)

    old = notebook(png, png, png)
    new = notebook(_png(near), _png(far), _png(near), text="ratio 0.6\n")
    new.cells[2].source = "plot(2, colour='red')"                      # an edited cell is written as it is
    assert course.keep_unchanged_figures(new, old) == 1
    figures = [c.outputs[1].data["image/png"] for c in new.cells]
    assert figures[0] == png and figures[1] == _png(far) and figures[2] == _png(near)
    assert all(c.outputs[0].text == "ratio 0.6\n" for c in new.cells)  # text is never replaced


def test_keep_unchanged_measurements_keeps_only_what_nbval_does_not_compare():
    """`make` on another machine or under load leaves measured outputs as committed: a cell tagged
    nbval-ignore-output keeps its outputs whole, a text equal after nbval's sanitizers keeps its digits;
    any other change of text, and any edited cell, is written as it comes."""
    out = nbformat.v4.new_output

    def notebook(coda, timing, ratio):
        cells = [nbformat.v4.new_code_cell("speed()", metadata={"tags": ["nbval-ignore-output"]}),
                 nbformat.v4.new_code_cell("step()"), nbformat.v4.new_code_cell("ratio()"),
                 nbformat.v4.new_code_cell("edited()")]
        texts = [coda, timing, ratio, timing]
        for cell, text in zip(cells, texts):
            cell.outputs = [out("stream", name="stdout", text=text)]
        return nbformat.v4.new_notebook(cells=cells)

    old = notebook("bound here 22.5 GB/s\n", "one step: 724 ms ± 95 ms; head 21% ± 5%\n", "ratio 0.5\n")
    new = notebook("bound here 5.1 GB/s\n", "one step: 679 ms ± 61 ms; head 20% ± 1%\n", "ratio 0.6\n")
    new.cells[3].source = "edited(again=True)"
    assert course.keep_unchanged_measurements(new, old) == 2
    texts = [c.outputs[0].text for c in new.cells]
    assert texts[0] == "bound here 22.5 GB/s\n", "the nbval-ignore-output cell keeps its committed outputs"
    assert texts[1] == "one step: 724 ms ± 95 ms; head 21% ± 5%\n", "a timing nbval sanitises keeps its digits"
    assert texts[2] == "ratio 0.6\n", "a text nbval compares is never replaced"
    assert texts[3] == "one step: 679 ms ± 61 ms; head 20% ± 1%\n", "an edited cell is written as it comes"
    # A cell added above (a scratch cell under a written question) moves the others: they stay paired by source.
    moved = notebook("bound here 5.1 GB/s\n", "one step: 679 ms ± 61 ms; head 20% ± 1%\n", "ratio 0.6\n")
    moved.cells[3].source = "edited(again=True)"
    moved.cells.insert(0, nbformat.v4.new_code_cell("# Scratch cell"))
    assert course.keep_unchanged_measurements(moved, old) == 2
    assert moved.cells[1].outputs[0].text == "bound here 22.5 GB/s\n", "paired by source, not by position"


@pytest.mark.parametrize("name", NAMES)
def test_committed_solutions_have_merged_streams(name):
    # Written through merge_streams, so rebuilding them does not change them just because the
    # kernel chunked a cell's printing differently.
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(nb.cells):
        kinds = [(o.output_type, o.get("name")) for o in cell.get("outputs", [])]
        assert all(not (a == b and a[0] == "stream") for a, b in zip(kinds, kinds[1:])), (name, i, kinds)
