"""The same submission gets the same verdict from nbgrader's Validate and from the grader, for every notebook
(issue 36): an exercise may use NumPy, the standard library, matplotlib and the course package as the grader
offers it (transformer_course/exercise_rule.py) -- nothing else the environment holds.

For each notebooks/NN_* (whatever exist; later ones included), one attacker, graded in one run of the real
grader (``python -m grader grade``, its sandbox): the released exercise with the source's solutions
(tests/fixtures/correct_class.py; that alone gets every autograded point and Validate's Success:
tests/test_grader_correct.py, tests/test_pipeline.py::test_a_correctly_filled_release_validates), except

* ``library`` cells: an exercise answered correctly with a library the grader does not offer, one library family
  per notebook (tests/fixtures/library_students.py: SciPy, mpmath, SymPy, transformers, PyTorch, scikit-learn,
  sentence-transformers and tokenizers, gguf, PyTorch's autograd, safetensors);
* ``twin`` cells: of the other exercises whose package function the grader blocks, the first and the last return
  that function (``return tc.softmax(x, axis=axis)``).

Each attacker, through ``Validator`` (what ``nbgrader validate`` and JupyterLab's Validate button run): no
Success; the attacked exercises' test cells fail with the grader's message naming the exercise and the rule; every
test cell the grader scores 0 fails, and a cell that fails besides does by the same rule (its visible checks call an
attacked exercise: 03's merge_heads test splits with split_heads, whose points the grader gives from its hidden
test alone). A fourth student of notebook 01 probes the sandbox itself: every installed distribution the rule leaves out is
not there (imported from a student's cell it is a stand-in whose every use raises the rule's message; from anywhere
else the import fails with it), also from the Python folders of the base interpreter and /usr added to sys.path and
from a fresh interpreter; the allowed ones import; the zygote left nothing of them in ``sys.modules``;
site-packages is read-only. A fifth imports PyTorch and SciPy in the set-up cell for a cell of their own: every
point, and Validate says Success ("the exercise scores 0 only if it needed it").
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import correct_class  # noqa: E402
import library_students  # noqa: E402
from grader.trusted import supervisor  # noqa: E402
from transformer_course import exercise_rule  # noqa: E402

pytestmark = pytest.mark.slow
NOTEBOOKS = correct_class.notebooks()
RULE = "not available while grading"


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _source(name: str) -> dict:
    return json.loads((ROOT / "notebooks" / name / f"{name}.ipynb").read_text(encoding="utf-8"))


def exercises(name: str) -> list[tuple[str, str]]:
    """(solution cell grade_id, exercise name) in the notebook's order: the functions its solution cells define."""
    out = []
    for cell in _source(name)["cells"]:
        if cell["cell_type"] == "code" and _meta(cell).get("solution"):
            text = correct_class.SOLUTION_MARKER.sub("", "".join(cell["source"]))
            for node in ast.parse(text).body:
                if isinstance(node, ast.FunctionDef):
                    out.append((_meta(cell)["grade_id"], node.name))
    return out


def hidden_calls(name: str) -> dict[str, set[str]]:
    """Test cell grade_id -> the exercises its hidden block calls."""
    found = {}
    for cell in _source(name)["cells"]:
        if cell["cell_type"] == "code" and _meta(cell).get("grade") and not _meta(cell).get("solution"):
            hidden = "".join(cell["source"]).split("### BEGIN HIDDEN TESTS")[-1]
            called = {n.func.id for n in ast.walk(ast.parse(hidden)) if isinstance(n, ast.Call)
                      and isinstance(n.func, ast.Name)}
            found[_meta(cell)["grade_id"]] = called & {e for _, e in exercises(name)}
    return found


def twin_cells(name: str, leave=()) -> dict[str, str]:
    """The first and the last exercise of the notebook whose package function of the same name the grader does not
    offer there (an earlier notebook's exercise asked again is blocked too: 02's softmax_backward in 10), answered
    by calling that function; of the solution cells not in ``leave`` (the library attack's)."""
    import transformer_course as tc

    rule = exercise_rule.rule_table()["notebooks"][name]
    chosen = [(gid, fn) for gid, fn in exercises(name) if gid not in leave and hasattr(tc, fn)
              and (fn in rule["blocked"].get(getattr(tc, fn).__module__, ())
                   or getattr(tc, fn).__module__ not in rule["modules"])]
    assert chosen, f"{name}: no exercise has a package twin the grader blocks"
    return {gid: (f"import transformer_course as tc\n"
                  f"def {fn}(*args, **kwargs):\n    return tc.{fn}(*args, **kwargs)     # the package's own\n")
            for gid, fn in (chosen[0], chosen[-1])}


def library_cells(name: str) -> tuple[str, dict[str, str]]:
    if name in library_students.ATTACKS:
        return library_students.ATTACKS[name]
    gid, fn = exercises(name)[0]
    family, template = library_students.GENERIC
    return family, {gid: template.format(name=fn)}


def attacker_cells(name: str) -> dict[str, str]:
    """The notebook's attacker: the library attack's cells, and the twin attack on other solution cells."""
    library = library_cells(name)[1]
    return {**library, **twin_cells(name, leave=set(library))}


def attacked(name: str, cells: dict[str, str]) -> set[str]:
    """The exercises a student's appended cells redefine."""
    return {node.name for code in cells.values() for node in ast.parse(code).body
            if isinstance(node, ast.FunctionDef) and node.name in {e for _, e in exercises(name)}}


def submission(name: str, cells: dict[str, str], extra: str | None = None) -> dict:
    """The correct submission with ``cells`` appended to those solution cells. The correct function of each
    exercise they redefine is kept as ``_correct_<name>`` (an attacker may call it): where the appended code fails
    to import, the exercise is not defined at all -- not left at the correct answer above it."""
    nb = correct_class.correct_submission(name)
    for cell in nb["cells"]:
        gid = _meta(cell).get("grade_id")
        if gid in cells:
            text = "".join(cell["source"]).rstrip("\n")
            for target in attacked(name, {gid: cells[gid]}):
                text, n = re.subn(rf"^def {target}\(", f"def _correct_{target}(", text, flags=re.M)
                assert n == 1, (name, target)
            cell["source"] = text + "\n\n\n" + cells[gid]
    if extra is not None:            # a student's own cell after the set-up cell
        first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
        nb["cells"].insert(first + 1, {"cell_type": "code", "id": "my-own-cell", "metadata": {}, "source": extra,
                                        "outputs": [], "execution_count": None})
    return nb


PROBE = r'''
import importlib, json, os, subprocess, sys
blocked, allowed, hidden, site = {blocked!r}, {allowed!r}, {hidden!r}, {site!r}
def attempt(name):
    # imported in a student's cell, a library left out is a stand-in: any use of it says the rule
    try:
        module = importlib.import_module(name)
        if type(module).__name__ != "NotAvailableModule":
            return "imported"
        module.anything_at_all(1)
        return "a stand-in that can be used"
    except ModuleNotFoundError as e:
        return "rule" if "{rule}" in str(e) else "plain: " + str(e)[:60]
    except Exception as e:
        return type(e).__name__
def say(key, value):                               # one short line each: the runner cuts lines at 1,000 characters
    print("PROBE " + json.dumps([key, value]))
say("preloaded", sorted({{m.split(".")[0] for m in sys.modules}} & set(blocked)))
import time
started = time.perf_counter()
outcomes = {{n: attempt(n) for n in blocked}}
say("blocked_tried", len(outcomes))
say("seconds_per_refused_import", (time.perf_counter() - started) / max(1, len(outcomes)))   # shown, not asserted
say("blocked_wrong", {{n: how for n, how in outcomes.items() if how != "rule"}})
say("allowed", {{n: attempt(n) for n in allowed}})
sys.path.extend(hidden)
importlib.invalidate_caches()
say("from_hidden_folders", {{n: attempt(n) for n in ("scipy", "sympy", "yaml", "torch")}})
from scipy.special import erf as _erf                 # a from-import too: bound, and refused when used
try:
    _erf(0.5)
    say("from_import_refused", False)
except ModuleNotFoundError as e:
    say("from_import_refused", "{rule}" in str(e))
say("hidden_not_empty", [h for h in hidden if os.path.isdir(h) and os.listdir(h)])
say("fresh_interpreter", subprocess.run([sys.executable, "-c", "import scipy"], capture_output=True).returncode)
say("usr_bin_python3_yaml", subprocess.run(["/usr/bin/python3", "-c", "import yaml"], capture_output=True).returncode
    if os.path.exists("/usr/bin/python3") else None)
try:
    open(os.path.join(site, "planted.py"), "w").close()
    say("site_writable", True)
except OSError:
    say("site_writable", False)
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    out = tmp_path_factory.mktemp("one_rule")
    site = supervisor.sandbox_site(Path(sys.prefix), ())
    probe = PROBE.format(blocked=site["blocked"], allowed=["numpy", "matplotlib", "IPython", "PIL", "threadpoolctl", "regex"],
                         hidden=site["hide"], site=site["site"], rule=RULE)
    students = {}
    for name in NOTEBOOKS:
        students[("attacker", name)] = submission(name, attacker_cells(name))
    students[("probe", NOTEBOOKS[0])] = submission(NOTEBOOKS[0], {}, extra=probe)
    students[("imports_unused", NOTEBOOKS[0])] = _imports_unused(NOTEBOOKS[0])
    for (student, name), nb in students.items():
        path = out / "submitted" / student / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
    env = dict(os.environ, COURSE_GRADING_SEED="20261236")
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--submitted", str(out / "submitted"),
                           "--grades", str(out / "grades"), "--quiet"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = {key: json.loads((out / "grades" / "results" / key[0] / f"{key[1]}.json").read_text())
               for key in students}
    return {"dir": out, "records": records, "students": students, "site": site}


def _imports_unused(name: str) -> dict:
    """An honest student who imports PyTorch and SciPy in the set-up cell and uses them in a cell of their own,
    never in an exercise: the import costs nothing, the exercises keep every point (and Validate says Success)."""
    nb = submission(name, {}, extra="x = torch.ones(3)\nprint(scipy.special.softmax(x.numpy()))   # my own look\n")
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    first["source"] = "import torch\nimport scipy.special\n" + "".join(first["source"])
    return nb


def _failed_tests(record: dict) -> set[str]:
    return {t["grade_id"] for t in record["tests"] if not t["passed"]}


def _validate(path: Path) -> tuple[dict, dict[str, str]]:
    """What nbgrader's Validate says of ``path``: its result, and each failed test cell's error text."""
    from nbgrader.validator import Validator

    class KeepExecuted(Validator):
        def _preprocess(self, nb):
            self.executed = super()._preprocess(nb)
            return self.executed

    validator = KeepExecuted()
    result = validator.validate(str(path))
    failed = {}
    for cell in validator._get_failed_cells(validator.executed):
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        failed[gid] = "\n".join(errors)
    return result, failed


def _full(record: dict) -> float:
    return sum(t["max_points"] for t in record["tests"])


def test_every_notebook_has_both_attacks():
    for name in NOTEBOOKS:
        library, twins = library_cells(name)[1], twin_cells(name, leave=set(library_cells(name)[1]))
        assert library and twins and not set(library) & set(twins), (name, sorted(library), sorted(twins))


def test_an_import_the_exercises_do_not_need_costs_nothing(graded, tmp_path):
    """'The exercise scores 0 only if it needed it': a student's set-up cell that imports libraries the rule leaves
    out, used only in the student's own cell, keeps every point; that cell fails while grading, with the rule's
    message (it runs in the student's kernel); Validate says Success, as the grader gives every point."""
    name = NOTEBOOKS[0]
    record = graded["records"]["imports_unused", name]
    assert not _failed_tests(record) and record["auto_points"] == _full(record) > 0
    errors = [c["error"] for c in record["cells"] if c.get("error")]
    assert len(errors) == 1 and RULE in errors[0]["evalue"], errors
    folder = tmp_path / "my work"
    folder.mkdir()
    path = folder / f"{name}.ipynb"
    nbformat.write(nbformat.from_dict(graded["students"]["imports_unused", name]), path)
    result, failed = _validate(path)
    assert "failed" not in result and not failed, failed


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_validate_and_the_grader_give_an_attacker_the_same_verdict(graded, tmp_path, name):
    student = "attacker"
    cells = attacker_cells(name)
    targets = attacked(name, cells)
    must_fail = {gid for gid, called in hidden_calls(name).items() if called & targets}
    assert must_fail, (name, targets)
    record = graded["records"][student, name]
    lost = _failed_tests(record)
    assert must_fail <= lost, f"{name} ({student}): the grader gave points to {must_fail - lost}: {record['details']}"
    assert record["auto_points"] == _full(record) - sum(t["max_points"] for t in record["tests"]
                                                                if t["grade_id"] in lost)
    said = json.dumps([[c for t in record["tests"] if t["grade_id"] in must_fail for c in t["cases"]],
                       [c.get("error") for c in record["cells"]]])
    assert RULE in said, f"{name} ({student}): the grader's feedback does not name the rule: {said[:1500]}"

    folder = tmp_path / "my work"            # as a student validates: a folder of their own, the notebook's name
    folder.mkdir()
    path = folder / f"{name}.ipynb"
    nbformat.write(nbformat.from_dict(graded["students"][student, name]), path)
    result, failed = _validate(path)
    assert "failed" in result, f"{name} ({student}): Validate says Success"
    # Every cell the grader scores 0, Validate fails; a cell Validate fails besides fails by the same rule (its
    # visible checks call an attacked exercise: 03's merge_heads test splits with split_heads) -- never otherwise.
    assert lost <= set(failed), f"{name} ({student}): Validate passes {sorted(lost - set(failed))}, the grader 0"
    extra = {gid: failed[gid] for gid in set(failed) - lost if RULE not in failed[gid]}
    assert not extra, f"{name} ({student}): Validate fails cells the grader scores, not by the rule: {extra}"
    for target in targets:
        named = [gid for gid in must_fail if target in hidden_calls(name)[gid] and target in failed[gid]
                 and RULE in failed[gid]]
        assert named, f"{name} ({student}): no failed test says why {target} fails: {failed}"


def test_the_sandbox_holds_only_what_the_rule_allows(graded):
    record = graded["records"]["probe", NOTEBOOKS[0]]
    output = "\n".join(c.get("output", "") for c in record["cells"])
    probe = dict(json.loads(line[len("PROBE "):]) for line in output.splitlines() if line.startswith("PROBE "))
    assert "site_writable" in probe, (output[-2000:], record["details"])
    site = graded["site"]
    assert len(site["blocked"]) > 100 and {"scipy", "torch", "transformers", "tokenizers", "safetensors", "gguf",
                                             "sklearn", "sympy", "mpmath", "sentence_transformers"} <= set(site["blocked"])
    assert probe["preloaded"] == [], f"the zygote left these in every sandbox: {probe['preloaded']}"
    assert probe["blocked_tried"] == len(site["blocked"])
    assert probe["blocked_wrong"] == {}, f"left out by the rule, yet importable or without its message: {probe}"
    assert set(probe["allowed"].values()) == {"imported"}, probe["allowed"]
    assert set(probe["from_hidden_folders"].values()) == {"rule"}, probe["from_hidden_folders"]
    assert site["hide"] and probe["hidden_not_empty"] == [], probe
    assert probe["from_import_refused"] is True
    assert probe["fresh_interpreter"] != 0 and probe["usr_bin_python3_yaml"] in (None, 1), probe
    assert probe["site_writable"] is False
    assert record["auto_points"] == _full(record) > 0
