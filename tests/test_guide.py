"""The instructor's guide (notebooks/GUIDE.md, issue 39), checked on every notebook, now and later (tools/guide.py):

* every exercise and written question of every notebook (discovered: a new notebook needs its entries) has an entry
  with all five parts, and the guide has no entry for an exercise that does not exist;
* each entry's tells (the expressions that are the step to work out) are part of the answer, and none of them can be
  read by the student before answering: not in the student version of the notebook (hints but the exercise's last,
  visible tests, later cells, the diagrams' text), not in the student theory.md, not in an earlier notebook;
* every mutant of tests/mutants is listed in its exercise's entry, with the message the visible test gives it as the
  generator (`python tools/guide.py mistakes`) writes it today (numbers aside: their digits follow the machine);
* the guide goes to solutions/ and the website, never to exercises/; a written question's scratch cell is released,
  tagged so that Run All goes past an error in it, and kept as the student's cell by the grader.

The checks are shown to fail on planted flaws below (and on the notebooks as they were before issue 39: see the
issue's closing note).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import course  # noqa: E402
import guide  # noqa: E402

NAMES = guide.notebook_names()


@lru_cache(maxsize=None)
def findings() -> tuple[str, ...]:
    return tuple(guide.check())


@pytest.mark.parametrize("name", NAMES)
def test_every_exercise_has_an_entry_and_no_step_is_on_the_students_page(name):
    mine = [f for f in findings() if f.startswith(name)]
    assert not mine, f"{len(mine)} finding(s) in {guide.GUIDE_NAME} for {name}:\n" + "\n".join(mine)


def test_the_guide_has_no_entry_without_an_exercise():
    stale = [f for f in findings() if not any(f.startswith(n) for n in NAMES)]
    assert not stale, "\n".join(stale)


def masked(text: str) -> str:
    """A message with its numbers replaced (their digits depend on the BLAS kernel and the CPU)."""
    return re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", text)


@pytest.mark.parametrize("name", [n for n in NAMES if guide.load_mutants(n)])
def test_the_mistakes_tables_are_what_the_visible_tests_say_today(name):
    """The Common mistakes tables are generated: rerun `python tools/guide.py mistakes NN_name` after changing a
    visible test, an exercise or a mutant."""
    entries = guide.parse_guide(guide.guide_path().read_text(encoding="utf-8"))
    stale = []
    for gid, messages in guide.visible_messages(name).items():
        table = entries[(name, gid)].fields.get("Common mistakes", "") if (name, gid) in entries else ""
        want = masked(guide.mistakes_table(messages))
        if want not in masked(table):
            stale.append(gid)
    assert not stale, f"{name}: the mistakes tables of {stale} are stale: run `python tools/guide.py mistakes {name}`"


def test_the_guide_goes_to_instructors_and_the_site_not_to_students():
    source = guide.guide_path().read_text(encoding="utf-8")
    assert (ROOT / "solutions" / guide.GUIDE_NAME).read_text(encoding="utf-8") == source, \
        "solutions/GUIDE.md is stale: run `make`"
    assert not (ROOT / "exercises" / guide.GUIDE_NAME).exists(), "the guide must not be in the student release"
    title = source.splitlines()[0]
    for path in (ROOT / "exercises").rglob("*"):
        if path.is_file() and path.suffix in (".md", ".ipynb", ".py", ".txt"):
            assert title not in path.read_text(encoding="utf-8", errors="replace"), f"{path} holds the guide"
    assert "solutions/GUIDE" in (ROOT / "site" / "_toc.yml").read_text(encoding="utf-8"), \
        "the website's table of contents must list the guide"


# ------------------------------------------------------------------ the checks fail on planted flaws
def planted_root(tmp_path: Path, edit=None) -> Path:
    """A copy of the repository's notebooks/ (lib and tests linked), optionally edited: edit(root)."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    (root / "lib").symlink_to(ROOT / "lib")
    (root / "tests").symlink_to(ROOT / "tests")
    if edit:
        edit(root)
    return root


def rewrite_cell(root: Path, name: str, index: int, change):
    path = root / "notebooks" / name / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[index].source = change(nb.cells[index].source)
    nbformat.write(nb, path)


def first_exercise_with_code_tell(name: str):
    entries = guide.parse_guide(guide.guide_path().read_text(encoding="utf-8"))
    nb = guide.read(name)
    for ex in guide.exercises(name, nb):
        tells = [t for how, t in entries[(name, ex.grade_id)].tells if how == "code" and not t.startswith(guide.REGEX_TELL)]
        if tells:
            return ex, tells[0]
    raise AssertionError(f"{name}: no exercise with a code tell")


def test_a_tell_put_above_its_exercise_is_found(tmp_path):
    ex, tell = first_exercise_with_code_tell("02_scaling")
    markdown = max(i for i, c in enumerate(guide.read("02_scaling").cells[:ex.index]) if c.cell_type == "markdown")

    def leak(root):
        rewrite_cell(root, "02_scaling", markdown, lambda s: s + f"\n\nA useful line: `{tell}`.")
    found = guide.check(planted_root(tmp_path, leak))
    assert any(f.startswith(f"02_scaling `{ex.grade_id}`") and "on the student's page, in the notebook" in f
               for f in found), found


def test_a_tell_in_an_early_hint_is_found_and_in_the_last_hint_it_is_not(tmp_path):
    nb = guide.read("01_attention")
    ex = next(e for e in guide.exercises("01_attention", nb) if e.grade_id == "lookup_query")
    assert len(ex.hints) >= 2
    entries = guide.parse_guide(guide.guide_path().read_text(encoding="utf-8"))
    tell = next(t for how, t in entries[("01_attention", "lookup_query")].tells if how == "code")
    cell = next(i for i, c in enumerate(nb.cells) if ex.hints[0] in c.source)

    def in_first(root):
        rewrite_cell(root, "01_attention", cell, lambda s: s.replace(ex.hints[0], ex.hints[0][:-10] + f" `{tell}` </details>"))
    found = guide.check(planted_root(tmp_path / "a", in_first))
    assert any("`lookup_query`" in f and tell in f and "student's page" in f for f in found), found

    def in_last(root):
        rewrite_cell(root, "01_attention", cell, lambda s: s.replace(ex.hints[-1], ex.hints[-1][:-10] + f" `{tell}` </details>"))
    assert not [f for f in guide.check(planted_root(tmp_path / "b", in_last)) if "`lookup_query`" in f]


def test_a_tell_in_the_student_theory_or_an_earlier_notebook_is_found(tmp_path):
    ex, tell = first_exercise_with_code_tell("03_multihead")

    def in_theory(root):
        path = root / "notebooks" / "theory.md"
        path.write_text(path.read_text(encoding="utf-8") + f"\n\nRemember `{tell}`.\n", encoding="utf-8")
    assert any(f.startswith(f"03_multihead `{ex.grade_id}`") and "theory.md (student version)" in f
               for f in guide.check(planted_root(tmp_path / "a", in_theory)))

    def in_01(root):
        rewrite_cell(root, "01_attention", 0, lambda s: s + f"\n\n`{tell}`")
    assert any(f.startswith(f"03_multihead `{ex.grade_id}`") and "notebook 01_attention" in f
               for f in guide.check(planted_root(tmp_path / "b", in_01)))


def test_missing_entry_unlisted_mutant_and_a_tell_that_is_no_answer_are_found(tmp_path):
    text = guide.guide_path().read_text(encoding="utf-8")
    entries = guide.parse_guide(text)
    # an entry removed: the exercise has none
    without = re.sub(r"^### `attention_entropy`.*?(?=^### `)", "", text, count=1, flags=re.S | re.M)
    assert any("`attention_entropy`: no entry" in f for f in guide.check(guide_text=without))
    # a mutant's row removed from its table
    mutant = entries[("01_attention", "softmax")].mutants[0]
    row = next(line for line in text.splitlines() if line.startswith(f"| {mutant} |"))
    assert any(repr(mutant) in f and "Common mistakes" in f for f in guide.check(guide_text=text.replace(row + "\n", "")))
    # a tell that is not part of the answer
    bogus = text.replace("**Tells.** `np.swapaxes(K,-1,-2)`", "**Tells.** `np.swapaxes(K,-1,-2)` · `xyzzy(42)`", 1)
    assert bogus != text
    assert any("`xyzzy(42)` is not part of the answer" in f for f in guide.check(guide_text=bogus))
    # an exercise that no longer exists
    ghost = text + "\n### `no_such_exercise` — gone\n\n**Tells.** `x`\n"
    assert any("no_such_exercise" in f and "does not have" in f for f in guide.check(guide_text=ghost))


def test_a_diagram_that_draws_the_step_is_read():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("diagrams.split_merge_heads(n=4)")])
    text = guide.diagram_text(nb)
    assert text and "split_heads" in text, text[:300]


# ------------------------------------------------------------------ scratch cells
# What a question says when it asks the student to compute or print something (the words of the course's questions).
QUESTION_ASKS_TO_COMPUTE = re.compile(r"\bCompute\b|\bcompute (?:and print|them|it)\b|\bprint both\b|\bEstimate\b|"
                                      r"\bHow many bytes\b|\bhow many times more\b|\bsmallest number\b|"
                                      r"\bwork out the standard deviation\b|\broughly how would\b")


@pytest.mark.parametrize("name", NAMES)
def test_written_questions_that_ask_to_compute_have_a_scratch_cell(name):
    import exercise_checks

    nb = guide.read(name)
    released = nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", as_version=4)
    scratch_ids = {c.get("id") for c in released.cells if course.SCRATCH in c.metadata.get("tags", [])}
    for i, cell in enumerate(nb.cells):
        if guide.kind(cell) != "written":
            continue
        start, _ = exercise_checks.question_prompt(nb, i)
        prompt = "\n".join(c.source for c in nb.cells[start:i] if c.cell_type == "markdown")
        after = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
        has_scratch = after is not None and course.SCRATCH in after.metadata.get("tags", [])
        if QUESTION_ASKS_TO_COMPUTE.search(prompt):
            assert has_scratch, f"{name}: the written question {guide.meta(cell)['grade_id']} asks to compute or print, " \
                                "and has no scratch cell under its answer cell"
        if has_scratch:
            assert after.get("id") in scratch_ids, f"{name}: the scratch cell after {guide.meta(cell)['grade_id']} is not released"
    for cell in released.cells:
        if course.SCRATCH in cell.metadata.get("tags", []):
            assert course.RAISES in cell.metadata["tags"], \
                f"{name}: a released scratch cell must be tagged {course.RAISES} (an error there must not stop Run All)"


def test_the_grader_keeps_a_filled_scratch_cell_as_the_students():
    from transformer_course_cases import CASES

    from grader.trusted import notebooks as grader_notebooks

    name = "01_attention"
    assignment = grader_notebooks.load_assignment(ROOT / "notebooks", name, CASES, release_dir=ROOT / "exercises")
    released = json.loads((ROOT / "exercises" / name / f"{name}.ipynb").read_text(encoding="utf-8"))
    cells = [{"cell_type": c["cell_type"], "source": "".join(c["source"]),
              "nbgrader": c.get("metadata", {}).get("nbgrader", {})} for c in released["cells"]]
    at = next(i for i, c in enumerate(released["cells"]) if course.SCRATCH in c.get("metadata", {}).get("tags", []))
    cells[at]["source"] = "print(out_split[4])   # the student's trial"
    rebuilt, _ = grader_notebooks.rebuild(assignment, cells)
    kept = [c for c in rebuilt if "the student's trial" in c.source]
    assert len(kept) == 1 and kept[0].owner == "student", [(c.owner, c.source[:40]) for c in kept]
