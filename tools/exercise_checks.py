"""Checks that an exercise teaches (issue 28): no bare assertions a student can hit, every numbered case of a
visible test asserted, every exercise heading followed by its task, every code suggestion in the text runnable,
no answer above its question, and none in a closing summary.

    python tools/exercise_checks.py            # report every notebook (what tests/test_exercises_teach.py checks)
    python tools/exercise_checks.py 02_scaling

Each check takes a source notebook (notebooks/NN_name/NN_name.ipynb, read with nbformat) and returns a list of
findings, one string each, that name the cell and say what is wrong; an empty list passes. The suggested snippets
are executed by tests/test_pipeline.py in the kernel that validates the source (no extra notebook execution).
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import course  # noqa: E402

THEORY = ROOT / "notebooks" / "theory.md"

DETAILS = re.compile(r"<details>.*?</details>", re.S)
MODEL_ANSWER_CELL = re.compile(r"\*Model answer\.\*|=== BEGIN MARK SCHEME ===")


def source(name: str):
    return nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)


def python_source(text: str) -> str:
    """A cell's source as plain Python (IPython's %magics turned into calls), for ast."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(text)


def meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(meta(cell).get("grade"))


def is_solution_code(cell) -> bool:
    return cell.cell_type == "code" and bool(meta(cell).get("solution")) and not meta(cell).get("grade")


def is_written_answer(cell) -> bool:
    return cell.cell_type == "markdown" and bool(meta(cell).get("solution"))


def visible(cell) -> str:
    """What the student sees of a cell in the release: hidden tests, solutions and mark schemes removed."""
    text = cell.source
    if cell.cell_type == "code":
        text = course.HIDDEN_BLOCK.sub("", text)
        text = re.sub(r"^[ \t]*### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[ \t]*\n?", "", text, flags=re.S | re.M)
    elif is_written_answer(cell):
        return ""                                    # the student's own answer cell: empty in the release
    return text


def label(name: str, i: int, cell) -> str:
    return f"{name} cell {i} ({cell.get('id', '?')})"


# ----------------------------------------------------------------------------------- 1. no bare assert
def student_facing_code_cells(nb) -> list[int]:
    """Indices of the code cells whose assertions a student can hit: every visible test cell, and every cell
    that runs the student's code (the cells the release tags `raises-exception`, course.py's data flow)."""
    tagged = set(course.tag_cells_that_run_student_code(copy.deepcopy(nb)))
    return [i for i, c in enumerate(nb.cells) if is_test_cell(c) or i in tagged]


def bare_asserts(name: str, nb, *, tests_only: bool) -> list[str]:
    """`assert cond` without a message in a cell a student can hit: it fails as a bare `AssertionError:`."""
    found = []
    cells = [i for i, c in enumerate(nb.cells) if is_test_cell(c)] if tests_only else student_facing_code_cells(nb)
    for i in cells:
        cell = nb.cells[i]
        for node in ast.walk(ast.parse(python_source(visible(cell)))):
            if isinstance(node, ast.Assert) and node.msg is None:
                found.append(f"{label(name, i, cell)}: `assert {ast.unparse(node.test)[:70]}` has no message "
                             "(say what property failed, what was expected and what came)")
    return found


# ----------------------------------------------------------------------------------- 2. numbered cases asserted
CASE_COMMENT = re.compile(r"^[ \t]*#[ \t]*(\d+)\.[ \t]+(\S.*)$", re.M)


def assertion_lines(tree) -> set[int]:
    """Lines on which an assertion starts: `assert ...`, a call of assert_close / assert_* / np.testing's
    assert_*, or a hidden case's `.check(...)`."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            lines.add(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called.startswith("assert") or called == "check":
                lines.add(node.lineno)
    return lines


def unasserted_cases(name: str, nb) -> list[str]:
    """A visible test cell that numbers its cases ("# 1. By hand ...", "# 2. ...") must number them 1, 2, 3, ...
    and assert something in every case's block (from its comment to the next numbered comment or the end of the
    visible part): a case the comment promises but no line checks is what a student's slip would pass."""
    found = []
    for i, cell in enumerate(nb.cells):
        if not is_test_cell(cell):
            continue
        text = visible(cell)
        # Numbered comments that stand on their own line only (not a "# 1." inside a longer comment).
        cases = [(text[:m.start()].count("\n") + 1, int(m.group(1)), m.group(2)) for m in CASE_COMMENT.finditer(text)]
        if not cases:
            continue
        numbers = [n for _, n, _ in cases]
        if numbers != list(range(1, len(numbers) + 1)):
            found.append(f"{label(name, i, cell)}: cases numbered {numbers}, expected 1..{len(numbers)} in order")
        asserted = assertion_lines(ast.parse(python_source(text)))
        ends = [line for line, _, _ in cases[1:]] + [text.count("\n") + 2]
        lines = text.splitlines()
        for (start, number, words), end in zip(cases, ends):
            if not any(start < line < end for line in asserted):
                found.append(f"{label(name, i, cell)}: case {number} ({words[:60]!r}) has no assertion after it")
                continue
            comment = "\n".join(l for l in lines[start - 1:end - 1] if l.lstrip().startswith("#"))
            checked = re.sub(r"\s+", "", "\n".join(re.sub(r"#.*$", "", l) for l in lines[start:end - 1]))
            calls = [k for node in ast.walk(ast.parse(python_source(text))) if isinstance(node, ast.Call)
                     and start < node.lineno < end for k in node.keywords if k.arg]
            keywords = {k.arg for k in calls}
            by_variable = {k.arg for k in calls if not isinstance(k.value, (ast.Constant, ast.UnaryOp))}
            numbers = set(re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])", checked))
            for setting, value in SETTING.findall(comment):
                # Only a setting of an argument the case passes by keyword (p for top_p=..., temperature=...):
                # "d = 4" describing the inputs is context, not a case.
                matching = {k for k in keywords if k == setting or k.endswith("_" + setting)}
                if matching & by_variable and value in numbers:
                    continue                          # run through a variable (a loop, a computed value)
                if matching and not re.search(rf"(?<![\w.]){re.escape(setting)}=-?{re.escape(value)}(?![\d.])|"
                                              rf"_{re.escape(setting)}=-?{re.escape(value)}(?![\d.])", checked):
                    found.append(f"{label(name, i, cell)}: case {number} names {setting} = {value}, but the case's "
                                 f"code never runs it")
    return found


# "p = 0.5", "top_k = 2", "T = 1.7" in a case's comment: a setting the case promises to check.
SETTING = re.compile(r"\b([A-Za-z_]\w*)[ \t]*=[ \t]*(-?\d+(?:\.\d+)?)(?![\w.])")


# ----------------------------------------------------------------------------------- 3. headings state the task
EXERCISE_HEADING = re.compile(r"^(#{2,4})[ \t]+(.*\bExercise\b.*)$", re.M)


def plain_words(markdown: str) -> list[str]:
    text = DETAILS.sub(" ", markdown)
    text = re.sub(r"^#{1,6}[ \t].*$", " ", text, flags=re.M)
    return re.findall(r"[A-Za-z0-9_]+", text)


def headings_without_task(name: str, nb) -> list[str]:
    """Under each exercise heading ("### Exercise N ...", "## ... Exercise ..."), before the next code cell or the
    next heading, there is text that states the task (at least MIN_TASK_WORDS words outside collapsed hints)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for m in EXERCISE_HEADING.finditer(cell.source):
            under = cell.source[m.end():]
            nxt = re.search(r"^#{1,6}[ \t]", under, re.M)
            under = under[:nxt.start()] if nxt else under
            j = i + 1
            while nxt is None and j < len(nb.cells) and nb.cells[j].cell_type == "markdown":
                more = nb.cells[j].source
                nxt = re.search(r"^#{1,6}[ \t]", more, re.M)
                under += "\n" + (more[:nxt.start()] if nxt else more)
                j += 1
            words = plain_words(under)
            if len(words) < MIN_TASK_WORDS:
                found.append(f"{label(name, i, cell)}: {m.group(2).strip()!r} has {len(words)} words of task under it "
                             f"before the next code cell or heading (at least {MIN_TASK_WORDS})")
    return found


MIN_TASK_WORDS = 12


# ----------------------------------------------------------------------------------- 4. suggested snippets run
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCED = re.compile(r"^```(?:python|py|ipython)?[ \t]*\n(.*?)^```", re.S | re.M)
# Words just before an inline span that make it a suggestion to run (not a name or a signature in the prose).
SUGGEST = re.compile(r"\b(evaluate|run|try|type|execute|time it yourself with|time [^.]* with)\s*$", re.I)


def suggested_snippets(markdown: str) -> list[str]:
    """Code the text suggests to run: fenced ```python blocks; inline spans that are an IPython magic with
    arguments (`%timeit f(x)`); inline spans right after "evaluate", "run", "try", "type", "time ... with"
    that parse as Python. A bare `%timeit` (the tool's name) is no snippet."""
    found = [m.group(1).strip("\n") for m in FENCED.finditer(markdown)]
    for m in INLINE_CODE.finditer(markdown):
        span = m.group(1).strip()
        before = re.sub(r"<[^>]+>", " ", markdown[max(0, m.start() - 60):m.start()])
        magic = re.match(r"%%?\w+\s+\S", span)
        bare_name = re.fullmatch(r"[\w.]+", span)
        if magic or (SUGGEST.search(before) and not span.startswith("%") and not bare_name and parses(span)):
            found.append(span)
    return found


def parses(code: str) -> bool:
    try:
        ast.parse(python_source(code))
    except SyntaxError:
        return False
    return True


def notebook_snippets(nb) -> list[tuple[int, str]]:
    """(cell index, snippet) for every snippet suggested in a markdown cell of the notebook."""
    return [(i, s) for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and not is_written_answer(c)
            for s in suggested_snippets(c.source)]


def runnable(snippet: str) -> str:
    """The snippet as it is run by the check: %timeit / %%timeit once (-n1 -r1), so the check stays fast."""
    return re.sub(r"^(%%?timeit)\b(?!\s+-n)", r"\1 -n1 -r1", snippet, flags=re.M)


SNIPPET_TAG = "exercise-checks-snippet"


def add_snippet_cells(nb) -> list[tuple[int, str]]:
    """Append one code cell per suggested snippet at the end of the notebook (run after everything else, in the
    notebook's namespace), tagged so that their outputs can be found; returns (markdown cell, snippet)."""
    snippets = notebook_snippets(nb)
    for i, snippet in snippets:
        cell = nbformat.v4.new_code_cell(runnable(snippet), metadata={"tags": [SNIPPET_TAG]})
        cell.metadata["exercise_checks"] = {"from_cell": i}
        nb.cells.append(cell)
    return snippets


def add_reporting_snippet_cells(nb, report) -> list[tuple[int, str]]:
    """As :func:`add_snippet_cells`, for a run whose outputs are not kept (``nbgrader validate`` on the command
    line): each cell runs its snippet with ``run_cell`` and appends a failure as a JSON line to the file ``report``
    (read it with :func:`reported_snippet_failures`). Returns (markdown cell, snippet)."""
    snippets = notebook_snippets(nb)
    for i, snippet in snippets:
        code = (f"_snippet = get_ipython().run_cell({runnable(snippet)!r}, silent=True)   # suggested by cell {i}\n"
                f"if not _snippet.success:\n"
                f"    _error = _snippet.error_in_exec or _snippet.error_before_exec\n"
                f"    with open({str(report)!r}, 'a', encoding='utf-8') as _report:\n"
                f"        _report.write(__import__('json').dumps([{i}, {snippet!r}, type(_error).__name__, "
                f"str(_error)[:120]]) + '\\n')\n")
        cell = nbformat.v4.new_code_cell(code, metadata={"tags": [SNIPPET_TAG]})
        cell.metadata["exercise_checks"] = {"from_cell": i}
        nb.cells.append(cell)
    return snippets


def reported_snippet_failures(name: str, report) -> list[str]:
    """The failures :func:`add_reporting_snippet_cells`' cells wrote to ``report``, said as failed_snippets says them."""
    import json
    from pathlib import Path

    path = Path(report)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [f"{name} cell {i}: the suggested `{snippet}` fails: {ename}: {evalue}"
            for i, snippet, ename, evalue in map(json.loads, lines)]


def failed_snippets(name: str, executed) -> list[str]:
    """The snippet cells of an executed notebook (add_snippet_cells) that raised."""
    found = []
    for cell in executed.cells:
        if SNIPPET_TAG not in cell.metadata.get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                i = cell.metadata["exercise_checks"]["from_cell"]
                found.append(f"{name} cell {i}: the suggested `{cell.source}` fails: {out['ename']}: "
                             f"{out['evalue'][:120]}")
    return found


# ----------------------------------------------------------------------------------- 5. no answer above its question
def words(text: str, *, math: bool = False) -> list[str]:
    """Lower-case words and numbers; thousands written 75 497 472, 75,497,472 or 75\\,497\\,472 as one number.
    LaTeX math ($...$, $$...$$) is left out unless `math`: a shared formula is notation, not a leaked answer
    (its numbers are checked by key_numbers)."""
    if not math:
        text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", " ", text, flags=re.S)
    text = re.sub(r"(?<=\d)(?:\\,|\\;|[ ,\u2009\u202f])(?=\d{3}\b)", "", text)
    return re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.lower())


def ngrams(seq: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(seq[k:k + n]) for k in range(len(seq) - n + 1)}


SHARED_WORDS = 8          # consecutive words shared with the answer that count as a leak


def key_numbers(text: str) -> set[str]:
    """Numbers a reader would recognise as a result: integers of at least five digits (75497472), decimals of at
    least three significant digits (0.731, 2.68); not sizes such as 1536 or 0.05 that a text gives anyway."""
    def key(w):
        digits = w.replace(".", "").lstrip("0")
        return len(digits) >= 3 if "." in w else len(digits) >= 5
    return {w for w in words(text, math=True) if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", w) and key(w)}


def question_prompt(nb, answer_index: int) -> tuple[int, str]:
    """(index of the cell where the question starts, its text): the question is the last "Question" heading in
    the markdown right above the answer cell and what follows it (the cell before it is text *above* it)."""
    start = answer_index - 1
    while start > 0 and nb.cells[start].cell_type == "markdown" and not is_written_answer(nb.cells[start]) \
            and not re.search(r"^#{2,4}[ \t].*Question", nb.cells[start].source, re.M):
        start -= 1
    cell = nb.cells[start]
    heading = list(re.finditer(r"^#{2,4}[ \t].*Question", cell.source, re.M))
    head = cell.source[heading[-1].start():] if heading else cell.source
    rest = "\n".join(c.source for c in nb.cells[start + 1:answer_index])
    return start, head + "\n" + rest


def text_above(nb, index: int, *, collapsed: bool) -> str:
    """Everything a student can read above cell `index` in the release (markdown and visible code); without
    `collapsed`, <details> blocks are left out (a hint behind "try first" is allowed to help)."""
    parts = []
    for cell in nb.cells[:index]:
        text = visible(cell)
        parts.append(text if collapsed else DETAILS.sub(" ", text))
    return "\n".join(parts)


def theory_text() -> str:
    """theory.md as the student release holds it (its answer blocks' bodies left out: course.student_text)."""
    return course.student_text("theory.md", THEORY.read_text(encoding="utf-8"))


def visible_tests(nb) -> str:
    return "\n".join(visible(c) for c in nb.cells if is_test_cell(c))


def leaked_written_answers(name: str, nb, theory: str | None = None) -> list[str]:
    """A written question's model answer and mark scheme must not appear in theory.md, in the notebook above the
    question (hints included) or in a visible test: no SHARED_WORDS consecutive words in common that the question
    itself does not contain, and none of the answer's key numbers that the question does not give."""
    theory = theory_text() if theory is None else theory
    found = []
    for i, cell in enumerate(nb.cells):
        if not (is_written_answer(cell) and MODEL_ANSWER_CELL.search(cell.source)):
            continue
        start, prompt = question_prompt(nb, i)
        given = ngrams(words(prompt), SHARED_WORDS)
        answer = ngrams(words(cell.source), SHARED_WORDS) - given
        numbers = key_numbers(cell.source) - key_numbers(prompt)
        above = text_above(nb, start, collapsed=True)
        heading = list(re.finditer(r"^#{2,4}[ \t].*Question", nb.cells[start].source, re.M))
        if heading:                                   # the text of the question's own cell above its heading
            above += "\n" + nb.cells[start].source[:heading[-1].start()]
        for where, text in (("theory.md", theory), ("the notebook above the question", above),
                            ("a visible test", visible_tests(nb))):
            shared = sorted(answer & ngrams(words(text), SHARED_WORDS))
            if shared:
                found.append(f"{label(name, i, cell)}: the answer shares {len(shared)} runs of {SHARED_WORDS} words "
                             f"with {where}, e.g. {' '.join(shared[0])!r}")
            numbers_there = sorted(numbers & key_numbers(text))
            if numbers_there:
                found.append(f"{label(name, i, cell)}: the answer's numbers {numbers_there} appear in {where}")
    return found


def distinctive_lines(solution: str) -> list[str]:
    """The solution's statements that say something of its own, each with its right-hand side (prose quotes it
    alone), blanks removed and quotes made single. Left out: what only converts or unpacks arguments
    (x = np.asarray(x, dtype=float), n, d = K.shape), returns names, calls a function on plain names (an API the
    text may point to: layer_norm(x, gamma, beta, eps)) or is shorter than MIN_LINE_CHARS."""
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(solution))
    except SyntaxError:
        return []
    keep = []

    def plain(node):
        return isinstance(node, (ast.Name, ast.Constant, ast.Attribute)) or (
            isinstance(node, ast.Tuple) and all(plain(e) for e in node.elts))

    for stmt in ast.walk(tree):
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr)) or getattr(stmt, "value", None) is None:
            continue
        value = stmt.value
        if plain(value) or (isinstance(value, ast.Call) and all(plain(a) for a in value.args)
                            and all(plain(k.value) for k in value.keywords)
                            and (not isinstance(value.func, ast.Attribute) or ast.unparse(value.func).startswith("np."))):
            continue
        if isinstance(value, ast.Attribute) and value.attr == "shape" or isinstance(value, ast.Subscript) and \
                isinstance(value.value, ast.Attribute) and value.value.attr == "shape":
            continue
        for part in {ast.unparse(stmt), ast.unparse(value)}:
            compact = re.sub(r"\s+", "", part).replace('"', "'")
            if len(compact) >= MIN_LINE_CHARS:
                keep.append(compact)
    return sorted(set(keep))


MIN_LINE_CHARS = 18


def leaked_solution_lines(name: str, nb, theory: str | None = None) -> list[str]:
    """A graded code exercise's distinctive solution lines must not be readable before it is answered: not in the
    markdown above it outside collapsed hints, not in theory.md, not in a visible test."""
    def compact(text):
        return re.sub(r"\s+", "", text).replace('"', "'")

    theory = compact(theory_text() if theory is None else theory)
    tests = compact(visible_tests(nb))
    found = []
    for i, cell in enumerate(nb.cells):
        if not is_solution_code(cell):
            continue
        m = re.search(r"### BEGIN SOLUTION(.*?)### END SOLUTION", cell.source, re.S)
        if not m:
            continue
        markdown_above = compact("\n".join(
            DETAILS.sub(" ", c.source) for c in nb.cells[:i] if c.cell_type == "markdown" and not is_written_answer(c)))
        for line in distinctive_lines(m.group(1)):
            for where, text in (("the text above (outside collapsed hints)", markdown_above),
                                ("theory.md", theory), ("a visible test", tests)):
                if line in text:
                    found.append(f"{label(name, i, cell)} ({meta(cell)['grade_id']}): the solution's `{line}` "
                                 f"appears in {where}")
    return found


# ----------------------------------------------------------------------------------- 6. no answer in a summary
# A notebook's closing recap: a markdown cell whose heading is exactly one of these titles ("## Summary").
SUMMARY_HEADING = re.compile(r"^#{1,4}[ \t]+(?:Summary|Recap|What you (?:built|learned|learnt)|Takeaways?)[ \t]*[.:]?[ \t]*$",
                             re.M | re.I)
MIN_FORMULA_CHARS = 8     # an equation shorter than this, both sides together and blanks removed, is notation (B=0)


def summary_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and not is_written_answer(c)
            and SUMMARY_HEADING.search(c.source)]


def notebook_number(name: str) -> int | None:
    m = re.match(r"(\d+)_", name)
    return int(m.group(1)) if m else None


def theory_answers(name: str, theory_full: str) -> list[str]:
    """The bodies of theory.md's answer blocks for this notebook ("(after notebook NN ...)": course.ANSWER_BLOCK)."""
    number = notebook_number(name)
    return [m.group(3) for m in course.ANSWER_BLOCK.finditer(theory_full) if int(m.group(2)) == number]


def _split_top(text: str, separators: str) -> list[str]:
    """``text`` cut at the characters of ``separators`` that stand outside (), [] and {}."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch in separators and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return parts + [text[start:]]


def equations(text: str) -> set[tuple[str, str]]:
    """Every equation the LaTeX maths of ``text`` states, as an (unordered) pair of sides with blanks, spacing and
    sizing commands removed: ``$a = b = c, \\quad d = e$`` states a=b, a=c, b=c and d=e."""
    display = re.findall(r"\$\$(.*?)\$\$", text, flags=re.S)
    rest = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    inline = re.findall(r"(?<!\\)\$([^$\n]+?)(?<!\\)\$", rest)
    found = set()
    for segment in display + inline:
        segment = re.sub(r"\\(?:left|right|[bB]igg?[lr]?|textstyle|displaystyle)(?![A-Za-z])|\\[,;:! ]|&", "", segment)
        for chain in _split_top(re.sub(r"\\q?quad(?![A-Za-z])|\\\\", "\x00", segment), "\x00,;"):
            sides = [re.sub(r"\s+", "", s).rstrip(".") for s in _split_top(chain, "=")]
            sides = [s for s in sides if s]
            for a in range(len(sides)):
                for b in range(a + 1, len(sides)):
                    if len(sides[a]) + len(sides[b]) >= MIN_FORMULA_CHARS:
                        found.add(tuple(sorted((sides[a], sides[b]))))
    return found


def leaked_in_summary(name: str, nb, theory_full: str | None = None) -> list[str]:
    """A summary cell must not state an exercise's answer: none of a graded code exercise's distinctive solution
    lines, no equation of a model answer or of theory.md's answer blocks for this notebook, no SHARED_WORDS
    consecutive words of them. What the student is given before answering (the student theory.md, the notebook
    above its first exercise, a written question's own text) is not an answer."""
    summaries = summary_cells(nb)
    if not summaries:
        return []
    theory_full = THEORY.read_text(encoding="utf-8") if theory_full is None else theory_full
    solutions = [i for i, c in enumerate(nb.cells) if is_solution_code(c) or is_written_answer(c)]
    given = course.student_text("theory.md", theory_full) + "\n" + text_above(nb, solutions[0] if solutions else 0,
                                                                                collapsed=False)
    given_words, given_equations = ngrams(words(given), SHARED_WORDS), equations(given)
    lines, answers = [], []                       # (where, text) of what answers an exercise
    for i, cell in enumerate(nb.cells):
        if is_solution_code(cell):
            m = re.search(r"### BEGIN SOLUTION(.*?)### END SOLUTION", cell.source, re.S)
            lines += [(f"the solution of {meta(cell).get('grade_id', i)}", line)
                      for line in (distinctive_lines(m.group(1)) if m else [])]
        elif is_written_answer(cell) and MODEL_ANSWER_CELL.search(cell.source):
            answers.append((f"the model answer of {meta(cell).get('grade_id', i)}", cell.source,
                            ngrams(words(question_prompt(nb, i)[1]), SHARED_WORDS)))
    answers += [("an answer block of theory.md", body, set()) for body in theory_answers(name, theory_full)]
    found = []
    for i in summaries:
        cell = nb.cells[i]
        compact = re.sub(r"\s+", "", cell.source).replace('"', "'")
        for where, line in lines:
            if line in compact:
                found.append(f"{label(name, i, cell)}: the summary states {where}: `{line}`")
        summary_words, summary_equations = ngrams(words(cell.source), SHARED_WORDS), equations(cell.source)
        for where, text, prompt in answers:
            shared = sorted((ngrams(words(text), SHARED_WORDS) - given_words - prompt) & summary_words)
            if shared:
                found.append(f"{label(name, i, cell)}: the summary shares {len(shared)} runs of {SHARED_WORDS} words "
                             f"with {where}, e.g. {' '.join(shared[0])!r}")
            stated = sorted((equations(text) - given_equations) & summary_equations)
            if stated:
                found.append(f"{label(name, i, cell)}: the summary states {where}'s equation "
                             f"{' = '.join(stated[0])!r}" + (f" and {len(stated) - 1} more" if len(stated) > 1 else ""))
    return found


# ----------------------------------------------------------------------------------- 7. no package twin in tests
def asked_names(nb) -> set[str]:
    """The functions and classes the notebook's solution cells define: what the student writes."""
    names = set()
    for cell in nb.cells:
        if is_solution_code(cell):
            try:
                tree = ast.parse(python_source(cell.source))
            except SyntaxError:
                continue
            names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def package_module_names(tree) -> set[str]:
    """Names a cell binds to the course package or one of its modules (`import transformer_course as tc`,
    `from transformer_course import quantization`, `from transformer_course import llama as course_llama`)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("transformer_course")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_course"):
            bound |= {a.asname or a.name for a in node.names}
    return bound


def cross_check_bodies(tree) -> set[int]:
    """ids of the nodes inside the body of an `if cross_check(...):` (a comparison skipped while grading)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Call) \
                and getattr(node.test.func, "id", getattr(node.test.func, "attr", None)) == "cross_check":
            inside |= {id(n) for statement in node.body for n in ast.walk(statement)}
    return inside


def twin_in_visible_tests(name: str, nb) -> list[str]:
    """A visible test must not compare the student's function with the package's function of the same name:
    returning the package's answer would pass it and Validate, and while grading that function is disabled.
    Inside `if cross_check(...):` it may, as a black box: the comparison is skipped while grading, and in the
    student's kernel the exercise rule (exercise_rule.py) stops an exercise that calls its twin."""
    asked = asked_names(nb)
    modules = {"tc", "transformer_course"}
    for cell in nb.cells:                      # modules bound anywhere above count (cells share a namespace)
        if cell.cell_type == "code":
            try:
                modules |= package_module_names(ast.parse(python_source(cell.source)))
            except SyntaxError:
                pass
    found = []
    for i, cell in enumerate(nb.cells):
        if not is_test_cell(cell):
            continue
        try:
            tree = ast.parse(python_source(visible(cell)))
        except SyntaxError:
            continue
        skipped = cross_check_bodies(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in asked and id(node) not in skipped
                    and isinstance(node.value, (ast.Name, ast.Attribute)) and ast.unparse(node.value).split(".")[0] in modules):
                found.append(f"{label(name, i, cell)}: the visible test calls the package's `{ast.unparse(node)}`, "
                             f"the twin of the asked `{node.attr}`; check against an independent reference or a property")
    return sorted(set(found))


# ----------------------------------------------------------------------------------- the report
CHECKS = {
    "bare_assert_in_tests": lambda name, nb: bare_asserts(name, nb, tests_only=True),
    "bare_assert_in_student_cells": lambda name, nb: bare_asserts(name, nb, tests_only=False),
    "numbered_cases_asserted": unasserted_cases,
    "headings_state_task": headings_without_task,
    "no_leaked_written_answer": leaked_written_answers,
    "no_leaked_solution_line": leaked_solution_lines,
    "no_answer_in_summary": leaked_in_summary,
    "no_package_twin_in_tests": twin_in_visible_tests,
}


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or course.assignments()
    bad = 0
    for name in names:
        nb = source(name)
        for check, run in CHECKS.items():
            findings = run(name, nb)
            bad += len(findings)
            for f in findings:
                print(f"[{check}] {f}")
        for i, s in notebook_snippets(nb):
            print(f"[snippet to run] {name} cell {i}: {s}")
    print(f"{bad} finding(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
