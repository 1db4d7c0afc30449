"""The grader's parts, one at a time, without a sandbox (fast; any user).

The end-to-end check -- the demo class graded in the real sandbox -- is
tests/test_grader_demo.py.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.trusted import collect, compare, grading, notebooks, package, report  # noqa: E402
from grader.trusted.supervisor import Limits, _Reader  # noqa: E402

NAME = "01_attention"


@pytest.fixture(scope="module")
def assignment():
    from transformer_course_cases import CASES

    return notebooks.load_assignment(ROOT / "notebooks", NAME, CASES, ROOT / "exercises")


@pytest.fixture(scope="module")
def released():
    return notebooks.read_submission(ROOT / "exercises" / NAME / f"{NAME}.ipynb", 1 << 30)


# --------------------------------------------------------------------------- the source
def test_source_tests_points_and_cases(assignment):
    tests = {t.grade_id: t for t in assignment.tests}
    assert set(tests) == {"test_softmax", "test_sdpa", "test_lookup_query"}
    assert tests["test_softmax"].points == 2 and tests["test_sdpa"].points == 3
    assert tests["test_lookup_query"].points == 3
    assert tests["test_softmax"].case_ids == ["attention.softmax", "attention.softmax_masked"]
    assert len(tests["test_sdpa"].case_ids) == 3
    assert "BEGIN HIDDEN" not in tests["test_sdpa"].visible and "hidden_case" not in tests["test_sdpa"].visible
    assert [w.grade_id for w in assignment.written] == ["written_values"]
    assert assignment.max_points == 10
    assert assignment.solution_names == {"softmax": ["softmax"], "sdpa": ["scaled_dot_product_attention"],
                                         "lookup_query": ["lookup_query"]}


# --------------------------------------------------------------------------- rebuilding a submission
def _by_id(cells):
    return {c.grade_id: c for c in cells if c.grade_id}


def _instructor_tests(cells):
    return [c.grade_id for c in cells if c.kind == "test" and c.owner == "instructor"]


def test_rebuild_untouched_release_keeps_order(assignment, released):
    cells, notes = notebooks.rebuild(assignment, released)
    assert notes == []
    assert _instructor_tests(cells) == ["test_softmax", "test_sdpa", "test_lookup_query"]
    ids = [c.grade_id for c in cells if c.grade_id]
    assert ids == ["softmax", "test_softmax", "sdpa", "test_sdpa", "lookup_query", "test_lookup_query", "written_values"]
    test = _by_id(cells)["test_sdpa"]
    assert test.chunks[0]["hidden"] is False and test.chunks[1]["hidden"] is True
    assert "hidden_case" in test.chunks[1]["code"] and "hidden_case" not in test.source
    assert all(c.owner == "course" for c in cells if c.kind == "plain" and c.source.strip())


@pytest.mark.parametrize("change", ["edit", "comment", "delete", "strip", "retype"])
def test_rebuild_restores_every_test_cell(assignment, released, change):
    cells = copy.deepcopy(released)
    out = []
    for cell in cells:
        if cell["nbgrader"].get("grade_id", "").startswith("test_"):
            if change == "edit":
                cell["source"] = "print('all good')"
            elif change == "comment":
                cell["source"] = "\n".join("# " + line for line in cell["source"].splitlines())
            elif change == "delete":
                continue
            elif change == "strip":
                cell["nbgrader"] = {}
                cell["source"] = "pass"
            elif change == "retype":
                cell["cell_type"] = "markdown"
        out.append(cell)
    rebuilt, notes = notebooks.rebuild(assignment, out)
    assert _instructor_tests(rebuilt) == ["test_softmax", "test_sdpa", "test_lookup_query"]
    order = [c.grade_id for c in rebuilt if c.grade_id]
    assert order.index("softmax") < order.index("test_softmax") < order.index("sdpa") < order.index("test_sdpa")
    for t in assignment.tests:
        cell = _by_id(rebuilt)[t.grade_id]
        assert cell.cell_type == "code" and cell.chunks[0]["code"] == t.visible and cell.chunks[1]["code"] == t.hidden
    assert len(notes) == len(assignment.tests)                          # one note per test cell


def test_rebuild_matches_solutions_without_metadata(assignment, released):
    stripped = copy.deepcopy(released)
    for cell in stripped:
        cell["nbgrader"] = {}
    cells, notes = notebooks.rebuild(assignment, stripped)
    ids = [c.grade_id for c in cells if c.grade_id]
    assert ids == ["softmax", "test_softmax", "sdpa", "test_sdpa", "lookup_query", "test_lookup_query"]  # the written answer is lost
    assert any("matched by the functions it defines" in n for n in notes)


def test_rebuild_duplicate_test_cells_run_once_as_the_instructors(assignment, released):
    cells = copy.deepcopy(released)
    dup = copy.deepcopy(next(c for c in cells if c["nbgrader"].get("grade_id") == "test_softmax"))
    dup["source"] = "print('copy')"
    cells.insert(3, dup)
    rebuilt, _ = notebooks.rebuild(assignment, cells)
    assert _instructor_tests(rebuilt) == ["test_softmax", "test_sdpa", "test_lookup_query"]
    assert any(c.source == "print('copy')" and c.owner == "student" and c.grade_id is None for c in rebuilt)


def test_read_submission_refuses_bad_files(tmp_path):
    bad = {
        "truncated.ipynb": '{"cells": [',
        "list.ipynb": "[1, 2]",
        "v3.ipynb": json.dumps({"worksheets": []}),
        "deep.ipynb": "[" * 100_000 + "]" * 100_000,
        "binary.ipynb": b"\xff\xfe\x00",
        "badcell.ipynb": json.dumps({"cells": [{"cell_type": "widget", "source": ""}]}),
    }
    for name, text in bad.items():
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(notebooks.InvalidNotebook):
            notebooks.read_submission(path, 1 << 20)
    big = tmp_path / "big.ipynb"
    big.write_text(json.dumps({"cells": [], "pad": "x" * 9000}))
    with pytest.raises(notebooks.InvalidNotebook, match="MB"):      # the file: more than 8 x the limit
        notebooks.read_submission(big, 1000)
    code = tmp_path / "code.ipynb"
    code.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x" * 2000, "metadata": {}}]}))
    with pytest.raises(notebooks.InvalidNotebook, match="outputs not counted"):
        notebooks.read_submission(code, 1000)


def test_outputs_do_not_count_towards_the_size_limit(tmp_path):
    """A notebook with many figures is big; only its cells' sources count (issue 12)."""
    figure = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * 100_000}}
    cells = [{"cell_type": "code", "source": f"plot({i})", "metadata": {}, "outputs": [figure] * 3}
             for i in range(100)]
    path = tmp_path / "figures.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert path.stat().st_size > 25_000_000
    got = notebooks.read_submission(path, 25 << 20, 256 << 20)
    assert [c["source"] for c in got] == [f"plot({i})" for i in range(100)]


def test_lone_surrogates_become_replacement_characters(tmp_path):
    """A lone surrogate (JSON escape \\ud83d) in a cell cannot stop writing the class's files."""
    path = tmp_path / "s.ipynb"
    path.write_text('{"cells": [{"cell_type": "markdown", "source": "bad \\ud83d end", "metadata": '
                    '{"nbgrader": {"grade_id": "w\\udc00"}}}]}')
    got = notebooks.read_submission(path, 1 << 20)
    assert got[0]["source"] == "bad \ufffd end" and got[0]["nbgrader"]["grade_id"] == "w\ufffd"
    got[0]["source"].encode("utf-8")


# --------------------------------------------------------------------------- the trusted comparison
def test_prepare_and_compare_roundtrip(tmp_path, assignment):
    prepared = compare.prepare_cases(assignment.case_ids, 1234, tmp_path / "inputs")
    manifest = json.loads((tmp_path / "inputs" / "manifest.json").read_text())
    assert set(manifest) == set(assignment.case_ids)
    # The sandbox side reads the same inputs back and exports; exact references pass.
    files = {}
    for case_id in assignment.case_ids:
        buf = io.BytesIO()
        np.savez(buf, **dict(zip(prepared.output_names[case_id], prepared.expected[case_id])))
        files[case_id + ".npz"] = buf.getvalue()
    assert all(compare.compare_case(c, prepared, files).passed for c in assignment.case_ids)
    # Same seed, same inputs; another seed, other inputs.
    again = compare.prepare_cases(["attention.sdpa"], 1234, tmp_path / "again")
    other = compare.prepare_cases(["attention.sdpa"], 4321, tmp_path / "other")
    ref = prepared.expected["attention.sdpa"][1]
    assert np.array_equal(again.expected["attention.sdpa"][1], ref)
    assert other.expected["attention.sdpa"][1].shape != ref.shape or not np.allclose(
        other.expected["attention.sdpa"][1], ref)


def test_derive_seed_differs_per_student_and_per_submission():
    """Same run seed and same submission: same inputs (a reproducible regrade). Another student,
    another run seed, or ANY change of the submission (a lookup table of last run's inputs): new ones."""
    work = b'{"cells": "def softmax(x): ..."}'
    assert compare.derive_seed(1, "alice", NAME, work) == compare.derive_seed(1, "alice", NAME, work)
    assert compare.derive_seed(1, "alice", NAME, work) != compare.derive_seed(1, "bob", NAME, work)
    assert compare.derive_seed(1, "alice", NAME, work) != compare.derive_seed(2, "alice", NAME, work)
    replay = work + b"\nTABLE = {...}"
    assert compare.derive_seed(1, "alice", NAME, work) != compare.derive_seed(1, "alice", NAME, replay)


@pytest.mark.parametrize("got,reason", [
    (np.array([[0.5, 0.5]], dtype=object), "float or integer"),
    (np.array([0.5, 0.5]), "shape"),
    (np.array([[np.nan, 0.5]]), "NaN"),
    (np.array([[0.5, 0.6]]), "relative error"),
    (np.array([[np.inf, 0.5]]), "infinite"),
    (np.array([[True, False]]), "float or integer"),
])
def test_compare_array_rejects(got, reason):
    assert reason in compare.compare_array("w", got, np.array([[0.5, 0.5]]), 1e-6)


def test_compare_array_accepts_float32_and_matching_infinities():
    assert compare.compare_array("w", np.array([0.5, 0.25], dtype=np.float32), np.array([0.5, 0.25]), 1e-6) == ""
    assert compare.compare_array("w", np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]), 1e-6) == ""
    assert compare.compare_array("w", np.array([3]), np.array([3.0]), 1e-6) == ""


def _prepared_one():
    return compare.Prepared(0, {"c": (np.zeros((3, 3)),)}, {"c": ("w",)}, {"c": 1e-6})


def test_exported_pickles_and_zip_bombs_are_refused():
    prepared = _prepared_one()
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    pickled = io.BytesIO()
    with zipfile.ZipFile(pickled, "w") as zf:
        zf.writestr("w.npy", buf.getvalue())
    r = compare.compare_case("c", prepared, {"c.npz": pickled.getvalue()})
    assert not r.passed and "unreadable" in r.reason
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", bytes(50 << 20))
    assert len(bomb.getvalue()) < 1 << 20
    r = compare.compare_case("c", prepared, {"c.npz": bomb.getvalue()})
    assert not r.passed and "larger than expected" in r.reason
    forged = io.BytesIO()                       # a header announcing 10^12 elements, 8 bytes of data
    header = io.BytesIO()
    from numpy.lib import format as npformat

    npformat.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
    with zipfile.ZipFile(forged, "w") as zf:
        zf.writestr("w.npy", header.getvalue() + bytes(8))
    r = compare.compare_case("c", prepared, {"c.npz": forged.getvalue()})
    assert not r.passed and "larger than expected" in r.reason
    short = io.BytesIO()
    header = io.BytesIO()
    npformat.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (3, 3)})
    with zipfile.ZipFile(short, "w") as zf:
        zf.writestr("w.npy", header.getvalue() + bytes(16))
    r = compare.compare_case("c", prepared, {"c.npz": short.getvalue()})
    assert not r.passed and "does not match its header" in r.reason
    good = io.BytesIO()
    np.savez(good, w=np.zeros((3, 3), dtype=np.float32))
    assert compare.compare_case("c", prepared, {"c.npz": good.getvalue()}).passed
    r = compare.compare_case("c", prepared, {}, {"c.npz": "the exported file is a FIFO: refused"})
    assert r.reason == "the exported file is a FIFO: refused"
    r = compare.compare_case("c", prepared, {"c.error.json": json.dumps({"reason": "w: expected a numeric array"})
                                             .encode()})
    assert "numeric" in r.reason


# --------------------------------------------------------------------------- the sandbox's package copy
def _run_with_package(dest, code):
    import subprocess

    prog = f"import sys; sys.path.insert(0, {str(dest)!r})\n" + code
    return subprocess.run([sys.executable, "-I", "-c", prog], capture_output=True, text=True)


def test_sandbox_package_blocks_this_notebooks_functions(tmp_path, assignment):
    plan = package.plan_for(assignment, ROOT / "lib")
    public = {(m, n) for m, n in plan.blocked if not package._private(m, n)}
    assert {n for _, n in public} == {"softmax", "scaled_dot_product_attention", "lookup_query"}
    # and the private helpers only those reach (argument checks of softmax and attention alone); the checks
    # the notebook's tools use too stay
    code = package.CourseCode(ROOT / "lib")
    assert plan.blocked - public <= package.reached_from(code, public, plan.modules)
    assert ("transformer_course._checks", "check_array") not in plan.blocked
    dest = package.build_sandbox_package(ROOT / "lib", tmp_path / "pkg", plan, NAME)
    assert not (dest / "transformer_course_cases").exists(), "the hidden cases are never in the sandbox"
    assert (dest / "transformer_course" / "grading.py").read_text() == package.SANDBOX_GRADING.read_text()
    out = _run_with_package(dest, (
        "import transformer_course as tc, numpy as np\n"
        f"assert tc.__file__.startswith({str(dest)!r})\n"
        "for f in (lambda: tc.softmax(np.zeros(3)), lambda: tc.scaled_dot_product_attention(*[np.ones((2, 2))] * 3)):\n"
        "    try:\n        f()\n    except NotImplementedError as e:\n        assert 'not available while grading' in str(e)\n"
        "    else:\n        raise SystemExit('reference reachable')\n"
        "import transformer_course.grading as g\n"
        "assert not hasattr(g, 'CASES') and not hasattr(g, 'case_rng')\n"
        "print('ok')\n"))
    assert out.stdout.strip() == "ok", out.stderr


def test_another_notebooks_module_cannot_compute_this_notebooks_answer(tmp_path, assignment):
    """flash_attention computes both exercises of notebook 01 (softmax = attention with zero scores, the
    input as an additive mask, V = I): notebook 01 does not import it, so its sandbox does not have it --
    by the rule (only what the notebook imports), not by its name."""
    import numpy as np
    import transformer_course as real
    import transformer_course_fast as fast

    x = np.random.default_rng(0).normal(size=(3, 5))
    zeros, eye = np.zeros((3, 5, 1)), np.broadcast_to(np.eye(5), (3, 5, 5))
    out = fast.flash_attention(zeros, zeros, eye, mask=x[:, None, :].repeat(5, 1))
    via_flash = (out[0] if isinstance(out, tuple) else out)[:, 0, :]
    assert np.allclose(via_flash, real.softmax(x)), "the premise: flash_attention computes softmax"

    plan = package.plan_for(assignment, ROOT / "lib")
    dest = package.build_sandbox_package(ROOT / "lib", tmp_path / "pkg", plan, NAME)
    out = _run_with_package(dest, (
        "import importlib\nimport transformer_course as tc\n"
        "for attempt in ('tc.flash_attention', 'tc.FastMultiHeadAttention',\n"
        "                'importlib.import_module(\"transformer_course_fast\").flash_attention'):\n"
        "    try:\n        eval(attempt)\n    except (AttributeError, ImportError):\n        pass\n"
        "    else:\n        raise SystemExit(attempt + ' reachable')\n"
        "import importlib, pkgutil\n"
        "names = {m.name for m in pkgutil.iter_modules(tc.__path__)}\n"
        "print(sorted(names))\n"))
    assert out.returncode == 0, out.stderr
    present = set(eval(out.stdout.strip()))
    # every module present is one notebook 01 imports, or one those import (the rule, whatever names)
    code = package.CourseCode(ROOT / "lib")
    imported, _, _ = package.notebook_imports(assignment, code)
    allowed = {m.split(".")[1] for m in code.closure(imported) if m.count(".") == 1} | {"grading"}
    assert present == allowed and "fast_attention" not in present
    assert plan.absent and all(m not in plan.modules for m in plan.absent)


def test_blocked_functions_of_earlier_notebooks_stay_available(assignment):
    """A later notebook may import what an earlier one built: blocked only where it is the exercise -- and a
    later notebook that asks for it again (its solution cells define it: 10 asks again for 02's
    softmax_backward) makes it that notebook's exercise, blocked there."""
    def later(asks):
        return notebooks.Assignment("99_later", ROOT, [notebooks.SourceCell(0, "code", "import transformer_course as tc\n"
                                                                                 "tc.scaled_dot_product_attention", None,
                                                                                 "plain")],
                                    [notebooks.TestCell("t", 1, ["attention.sdpa"], "", "")],
                                    [], {"x": asks})
    plan = package.plan_for(later([]), ROOT / "lib", [assignment])
    assert "transformer_course.attention" in plan.modules and plan.blocked == set()
    plan = package.plan_for(later(["scaled_dot_product_attention"]), ROOT / "lib", [assignment])
    assert ("transformer_course.attention", "scaled_dot_product_attention") in plan.blocked, \
        "asked again in a later notebook, the package's function must be blocked there"


def _plan_with_earlier(name):
    from transformer_course_cases import CASES

    a = notebooks.load_assignment(ROOT / "notebooks", name, CASES, ROOT / "exercises")
    earlier = [notebooks.load_assignment(ROOT / "notebooks", e, CASES)
               for e in sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.name[:2].isdigit()) if e < name]
    return package.plan_for(a, ROOT / "lib", earlier)


def test_the_exercises_and_their_twins_are_blocked_not_what_the_references_use(tmp_path):
    """The block rule reads the solution cells and the declared twins, not the references: 03's reference
    runs MultiHeadAttention (multi_head_attention's declared twin: blocked in 03), 08's run
    MultiHeadAttention, causal_self_attention and TransformerDecoderBlock -- in 08 the exercise's
    same-named causal_self_attention is blocked, not the classes: a block's self-attention IS that function,
    so a DecoderLM runs in 08's sandbox on a function it is given (the student's) and not on its own."""
    from transformer_course_cases import CASES, TWINS

    assert TWINS["multi_head_attention"] == ("MultiHeadAttention",)
    assert CASES["multihead.mha"].reference.__globals__["MultiHeadAttention"].__name__ == "MultiHeadAttention"
    three = _plan_with_earlier("03_multihead")
    assert "MultiHeadAttention" in three.blocked_names
    assert "scaled_dot_product_attention" not in three.blocked_names     # 01's exercise, given in 03
    dest = package.build_sandbox_package(ROOT / "lib", tmp_path / "pkg03", three, "03_multihead")
    out = _run_with_package(dest, (
        "import numpy as np, transformer_course as tc\n"
        "try:\n    tc.MultiHeadAttention(4, 2, rng=np.random.default_rng(0))\n"
        "except NotImplementedError as e:\n    assert 'not available while grading' in str(e)\n"
        "else:\n    raise SystemExit('the twin is reachable')\nprint('ok')\n"))
    assert out.stdout.strip() == "ok", out.stderr

    eight = _plan_with_earlier("08_decoder")
    assert "causal_self_attention" in eight.blocked_names
    assert not eight.blocked_names & {"MultiHeadAttention", "TransformerDecoderBlock", "DecoderLM", "KVCache"}
    dest = package.build_sandbox_package(ROOT / "lib", tmp_path / "pkg08", eight, "08_decoder")
    out = _run_with_package(dest, (
        "import numpy as np, transformer_course as tc\nfrom transformer_course.decoder import DecoderLM\n"
        "lm = DecoderLM.random(vocab_size=7, d_model=8, n_heads=2, n_layers=1, max_len=9, rng=np.random.default_rng(1))\n"
        "def mine(x, params, n_heads, cache=None):      # a student's (no cache needed here): heads of 4, uniform\n"
        "    n = x.shape[-2]\n"
        "    w = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]\n"
        "    k = np.zeros((n_heads, n, x.shape[-1] // n_heads))\n"
        "    return w @ x, np.broadcast_to(w, (n_heads, n, n)), (k, k)\n"
        "assert lm.with_self_attention(mine).logits(np.array([1, 2, 3])).shape == (3, 7)\n"
        "for attempt in (lambda: lm.logits(np.array([1, 2, 3])),\n"
        "                lambda: tc.decoder.causal_self_attention(np.zeros((2, 8)), tc.decoder.attention_params(lm.blocks[0].self_attention), 2)):\n"
        "    try:\n        attempt()\n    except NotImplementedError:\n        continue\n"
        "    raise SystemExit('the package computes causal_self_attention')\n"
        "print('ok')\n"))
    assert out.stdout.strip() == "ok", out.stderr


def test_private_helpers_only_the_exercises_reach_are_blocked():
    """The package's classes are thin holders over shared private helpers: MultiHeadAttention and
    multi_head_attention both call multihead._project_attend_merge, PositionwiseFeedForward and
    feed_forward call feedforward._two_layers, the encoder block's two forms encoder._residual_block.
    A private helper that a blocked name reaches, and that nothing the sandbox keeps working reaches
    (the public API of the modules the notebook imports, earlier notebooks' exercises, what the
    notebook's cells name, import-time code), is blocked too."""
    from transformer_course_cases import CASES

    code = package.CourseCode(ROOT / "lib")
    helper = ("transformer_course.multihead", "_project_attend_merge")
    three = _plan_with_earlier("03_multihead")
    assert helper in three.blocked
    # encoder_block (05's exercise) calls the helper too and is in 03's copy -- torch_interop imports encoder --
    # but 03 does not import encoder itself: it keeps 03's tools working, not encoder's public API.
    a3 = notebooks.load_assignment(ROOT / "notebooks", "03_multihead", CASES)
    assert helper in package.calls(code, "transformer_course.encoder", "encoder_block")
    assert "transformer_course.encoder" in three.modules
    assert "transformer_course.encoder" not in package.notebook_imports(a3, code)[0]
    # what 03's own tools need stays: the argument checks that its imported modules' functions use
    assert ("transformer_course._checks", "check_array") not in three.blocked

    five = _plan_with_earlier("05_encoder_block")
    assert {("transformer_course.feedforward", "_two_layers"), ("transformer_course.encoder", "_residual_block")} \
        <= five.blocked
    # 05 blocks encoder_block, but keeps MultiHeadAttention (03's exercise, given in 05), and that reaches the
    # helper: so it stays in 05, where it computes nothing 05 asks for.
    assert helper not in five.blocked
    given = package._built_by(notebooks.load_assignment(ROOT / "notebooks", "03_multihead", CASES), code)
    assert ("transformer_course.multihead", "MultiHeadAttention") in given - five.blocked
    assert helper in package.reached_from(code, {("transformer_course.multihead", "MultiHeadAttention")},
                                          five.modules, avoid=five.blocked)


_ATTACKS = {
    # 03: the student's own split_heads/merge_heads (exercise 1, graded on its own) put into the package's
    # module, then exercise 2 answered by the package's private multi-head computation
    "03_multihead": ("multihead.mha", (
        "import numpy as np, transformer_course as tc\n"
        "def split_heads(x, n_heads):\n"
        "    *lead, n, d = x.shape\n"
        "    return np.swapaxes(x.reshape(*lead, n, n_heads, d // n_heads), -2, -3)\n"
        "def merge_heads(x):\n"
        "    *lead, h, n, d = x.shape\n"
        "    return np.swapaxes(x, -2, -3).reshape(*lead, n, h * d)\n"
        "tc.multihead.split_heads, tc.multihead.merge_heads = split_heads, merge_heads\n"
        "def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):\n"
        "    return tc.multihead._project_attend_merge(X, X, X, (W_Q, W_K, W_V, W_O), (None,) * 4, n_heads, mask)\n")),
    "05_encoder_block": ("encoder.feed_forward", (
        "from transformer_course.feedforward import _two_layers\n"
        "from transformer_course.activations import relu\n"
        "def feed_forward(x, W_1, b_1, W_2, b_2):\n"
        "    return _two_layers(x, W_1, b_1, W_2, b_2, relu)\n")),
}


@pytest.mark.parametrize("name", sorted(_ATTACKS))
def test_a_submission_answering_with_a_private_helper_gets_no_points(tmp_path, name):
    """The student's function delegates to the package's private helper; the sandbox's copy of the package
    (built as for grading), the exercise's hidden block from the source, the trusted comparison outside.
    With the helper left working (the rule before: private names never blocked) every case passes -- the
    hole was real; with the rule, none does."""
    case_id, student = _ATTACKS[name]
    plan = _plan_with_earlier(name)
    test = next(t for t in _plan_assignment(name).tests if case_id in t.case_ids)
    before = package.PackagePlan(plan.modules, {b for b in plan.blocked if not package._private(*b)})
    hidden = "\n".join("    " + line for line in test.hidden.splitlines())
    results = {}
    for label, p in (("before", before), ("rule", plan)):
        work = tmp_path / label
        dest = package.build_sandbox_package(ROOT / "lib", work / "pkg", p, name)
        prepared = compare.prepare_cases(test.case_ids, 20261204, work / "inputs")
        (work / "exports").mkdir()
        prog = (f"import sys; sys.path.insert(0, {str(dest)!r})\n" + student
                + "try:\n" + hidden + "\nexcept NotImplementedError as e:\n    print('refused:', e)\n")
        env = dict(os.environ, COURSE_GRADING_INPUTS=str(work / "inputs"), COURSE_GRADING_EXPORT=str(work / "exports"))
        out = subprocess.run([sys.executable, "-I", "-c", prog], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        files = {f.name: f.read_bytes() for f in (work / "exports").iterdir()}
        results[label] = ([compare.compare_case(c, prepared, files).passed for c in test.case_ids], out.stdout)
    assert all(results["before"][0]), f"{name}: the attack should compute the answer with the helper working"
    assert not any(results["rule"][0]), f"{name}: a private helper answered the exercise: {results['rule']}"
    assert "refused:" in results["rule"][1] and "only its exercises use it" in results["rule"][1]


def _plan_assignment(name):
    from transformer_course_cases import CASES

    return notebooks.load_assignment(ROOT / "notebooks", name, CASES, ROOT / "exercises")


def test_what_the_solution_uses_is_never_blocked(tmp_path):
    """Notebook 07's solution uses layer_norm and TransformerEncoderBlock, which call the private
    argument checks: nothing of that is blocked (issue 12: a correct 07 lost 6 points)."""
    from transformer_course_cases import CASES

    name = "07_pretrained_minilm"
    a = notebooks.load_assignment(ROOT / "notebooks", name, CASES, ROOT / "exercises")
    earlier = [notebooks.load_assignment(ROOT / "notebooks", e, CASES)
               for e in sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.name[:2].isdigit()) if e < name]
    plan = package.plan_for(a, ROOT / "lib", earlier)
    assert not any(package._private(m, n) for m, n in plan.blocked)
    assert not plan.blocked_names & {"layer_norm", "TransformerEncoderBlock"}


def test_sandbox_package_ships_the_data_files_its_modules_name(tmp_path):
    """Notebook 09 compares the model with a stored reference (smollm2_reference.npz, named by
    smollm2_reference.py): the sandbox's copy holds it, so that cell runs while grading (trial 09:
    FileNotFoundError, then six NameErrors in a correct submission's feedback)."""
    from transformer_course_cases import CASES

    name = "09_llm"
    a = notebooks.load_assignment(ROOT / "notebooks", name, CASES, ROOT / "exercises")
    earlier = [notebooks.load_assignment(ROOT / "notebooks", e, CASES)
               for e in sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.name[:2].isdigit()) if e < name]
    plan = package.plan_for(a, ROOT / "lib", earlier)
    dest = package.build_sandbox_package(ROOT / "lib", tmp_path / "pkg", plan, name)
    assert (dest / "transformer_course" / "smollm2_reference.npz").is_file()
    assert not (dest / "transformer_course" / "minilm_reference.npz").exists()   # pretrained.py is not copied
    out = _run_with_package(dest, "from transformer_course.smollm2_reference import read_reference\n"
                                  "print(sorted(read_reference())[:2])\n")
    assert out.stdout.strip() == "['greedy_0', 'greedy_1']", out.stderr


def test_sandbox_grading_module_exports_only(tmp_path, monkeypatch):
    """The sandbox's hidden_case: inputs from files, check() writes arrays, never compares."""
    import importlib.util

    prepared = compare.prepare_cases(["attention.softmax"], 7, tmp_path / "inputs")
    monkeypatch.setenv("COURSE_GRADING_INPUTS", str(tmp_path / "inputs"))
    monkeypatch.setenv("COURSE_GRADING_EXPORT", str(tmp_path / "exports"))
    (tmp_path / "exports").mkdir()
    spec = importlib.util.spec_from_file_location("sandbox_grading", ROOT / "grader" / "sandboxed" / "grading_module.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = mod.hidden_case("attention.softmax")
    assert set(case.inputs) == {"x", "axis"} and isinstance(case.inputs["axis"], int)
    with pytest.raises(RuntimeError):
        case.expected()
    case.check(np.zeros_like(case.inputs["x"]))          # wrong, but check() does not judge
    files = {p.name: p.read_bytes() for p in (tmp_path / "exports").iterdir()}
    r = compare.compare_case("attention.softmax", prepared, files)
    assert not r.passed and "relative error" in r.reason
    from transformer_course import softmax

    case.check(softmax(**case.inputs))
    files = {p.name: p.read_bytes() for p in (tmp_path / "exports").iterdir()}
    assert compare.compare_case("attention.softmax", prepared, files).passed

    class Anything:
        def __eq__(self, other):
            return True

    with pytest.raises(AssertionError):
        case.check(Anything())
    assert (tmp_path / "exports" / "attention.softmax.error.json").exists()


# --------------------------------------------------------------------------- the output pipe
def _feed_all(reader, data, step):
    for i in range(0, len(data), step):
        reader.feed(data[i:i + step])
    reader.finish()


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_reader_splits_cells_and_caps_output(step):
    limits = Limits(cell_output_bytes=200, line_chars=50, total_output_bytes=10_000)
    nonce = "abc"
    mark = lambda event, payload: f"\n\x1e{nonce} {event} {json.dumps(payload)}\n".encode()  # noqa: E731
    data = (b"set-up noise\n" + mark("ready", {}) + mark("start", {"cell": 3}) + mark("chunk", {"cell": 3})
            + b"hello\n" + b"x" * 5000 + b"\n" + b"more\n" * 100
            + mark("result", {"cell": 3, "error": None}) + mark("chunk", {"cell": 3, "hidden": True})
            + b"SECRET hidden output\n" + mark("result", {"cell": 3}) + mark("end", {"cell": 3})
            + mark("start", {"cell": 4}) + b"tail without newline")
    reader = _Reader(nonce, limits)
    _feed_all(reader, data, step)
    assert [e for e, _ in reader.events] == ["ready", "start", "chunk", "result", "chunk", "result", "end", "start"]
    cell = reader.cells[3]
    text = "\n".join(cell.output)
    assert "hello" in text and "line cut" in text and "SECRET" not in text
    assert cell.kept_bytes <= 200 + 60 and cell.dropped_bytes > 0 and cell.ended
    assert reader.cells[4].output[-1] == "tail without newline" and not reader.cells[4].ended
    assert "set-up noise" in reader.preamble.decode()


def test_reader_ignores_forged_markers_with_another_nonce():
    reader = _Reader("real", Limits())
    reader.feed(b"\n\x1ereal start {\"cell\": 1}\n\x1efake done {}\nok\n")
    reader.finish()
    assert [e for e, _ in reader.events] == ["start"]
    assert "\x1efake done {}" in reader.cells[1].output


# --------------------------------------------------------------------------- table, hand grades, class list
def _record(**over):
    base = {"student": "s", "notebook": NAME, "auto_status": None, "auto_points": 2.0, "max_points": 7.0,
            "tests": [{"grade_id": "test_softmax", "points": 2.0, "max_points": 2.0, "passed": True, "cases": []},
                      {"grade_id": "test_sdpa", "points": 0.0, "max_points": 3.0, "passed": False, "cases": []}],
            "written": [{"grade_id": "written_values", "max_points": 2.0, "missing": False, "unchanged": False}],
            "details": [], "cells": [], "run": None}
    base.update(over)
    return base


def test_rows_status_and_hand_grades():
    row = report.row_for(_record(), {})
    assert (row["points"], row["status"]) == ("2", grading.MANUAL)
    row = report.row_for(_record(), {("s", NAME, "written_values"): {"points": "1.5"}})
    assert (row["points"], row["status"]) == ("3.5", grading.GRADED)
    unchanged = _record(written=[{"grade_id": "written_values", "max_points": 2.0, "missing": False,
                                  "unchanged": True}])
    assert report.row_for(unchanged, {})["status"] == grading.GRADED
    crashed = report.row_for(_record(auto_status=grading.CRASHED), {})
    assert crashed["status"] == grading.CRASHED and "needs manual grading" in crashed["details"]
    absent = report.row_for(_record(auto_status=grading.NO_SUBMISSION, auto_points=0.0), {})
    assert (absent["points"], absent["status"]) == ("0", grading.NO_SUBMISSION)


def test_manual_command_and_table(tmp_path):
    grades = tmp_path / "grades"
    (grades / "results" / "s").mkdir(parents=True)
    (grades / "results" / "s" / f"{NAME}.json").write_text(json.dumps(_record(student="s")))
    from grader.__main__ import main

    with pytest.raises(SystemExit, match="between 0 and 2"):
        main(["manual", "--grades", str(grades), "--student", "s", "--notebook", NAME,
              "--cell", "written_values", "--points", "3"])
    with pytest.raises(SystemExit, match="no written answer"):
        main(["manual", "--grades", str(grades), "--student", "s", "--notebook", NAME,
              "--cell", "test_sdpa", "--points", "1"])
    assert main(["manual", "--grades", str(grades), "--student", "s", "--notebook", NAME,
                 "--cell", "written_values", "--points", "1.5", "--comment", "good"]) == 0
    rows = list(__import__("csv").DictReader((grades / "grades.csv").open()))
    assert rows == [{"student": "s", "notebook": NAME, "raw_points": "3.5", "late_penalty": "0", "points": "3.5",
                     "max_points": "7", "status": "graded", "submitted": "", "due": "", "days_late": "",
                     "details": "failed: test_sdpa"}]
    html = (grades / "feedback" / "s" / f"{NAME}.html").read_text()
    assert "graded by hand: good" in html


def test_feedback_escapes_student_text(tmp_path):
    record = _record(student="<script>x</script>", cells=[
        {"index": 0, "cell_type": "code", "owner": "student", "kind": "plain", "grade_id": None,
         "source": "print('<img src=x onerror=alert(1)>')", "note": "", "ran": True,
         "output": "<b>bold</b>", "error": {"ename": "E", "evalue": "<i>"}}])
    row = report.row_for(record, {})
    path = report.write_feedback(tmp_path, record, row, {})
    html = path.read_text()
    assert "<script>x" not in html and "<img" not in html and "<b>bold" not in html and "<i>" not in html
    assert "&lt;img src=x" in html


def test_feedback_folds_course_cells_stopped_by_the_switched_off_reference(tmp_path):
    """Trial 09: a correct submission's feedback showed nine errors of course cells that need the package's
    model (built from this notebook's reference, off while grading). Such a cell, and a later course cell that
    fails only on a name it could not define, are folded with a note; a student's own NameError is not."""
    off = "transformer_course.quantization.dequantize_q8_0 is what this notebook asks you to write: ..."

    def cell(index, owner, kind, ename, evalue):
        return {"index": index, "cell_type": "code", "owner": owner, "kind": kind, "grade_id": None,
                "source": f"cell_{index}()", "note": "", "ran": True, "output": "",
                "error": {"ename": ename, "evalue": evalue}}

    record = _record(cells=[cell(0, "student", "plain", "NameError", "name 'early' is not defined"),
                            cell(1, "course", "plain", "NotImplementedError", off),
                            cell(2, "course", "plain", "NameError", "name 'lm' is not defined"),
                            cell(3, "student", "plain", "NameError", "name 'lm' is not defined")])
    html = report.write_feedback(tmp_path, record, report.row_for(record, {}), {}).read_text()
    assert html.count("stopped while grading (costs no points)") == 2
    assert "uses what cell 1 builds with the course&#x27;s reference" in html or \
        "uses what cell 1 builds with the course's reference" in html
    assert "<div class='cell student'><div class='meta'>cell 0" in html
    assert "<div class='cell student'><div class='meta'>cell 3" in html


def test_csv_cells_cannot_be_formulas(tmp_path):
    grades = tmp_path
    (grades / "results" / "=evil").mkdir(parents=True)
    (grades / "results" / "=evil" / f"{NAME}.json").write_text(json.dumps(_record(
        student="=evil", details=["found =HYPERLINK(\"x\").ipynb"])))
    report.write_table(grades)
    text = (grades / "grades.csv").read_text()
    assert "'=evil" in text and ",=" not in text


def test_classlist_import_merges(tmp_path):
    first = tmp_path / "a.csv"
    first.write_text("id,first_name,last_name,email\nalice,Alice,A,a@x\nbob,Bob,B,b@x\n")
    second = tmp_path / "b.csv"
    second.write_text("\ufeffid,first_name,last_name,email\nbob,Robert,B,b@x\ncarol,Carol,C,c@x\n")
    assert report.import_roster(tmp_path / "g", first) == (2, 2)
    assert report.import_roster(tmp_path / "g", second) == (1, 3)
    roster = {r["id"]: r for r in report.load_roster(tmp_path / "g")}
    assert roster["bob"]["first_name"] == "Robert" and set(roster) == {"alice", "bob", "carol"}
    bad = tmp_path / "bad.csv"
    bad.write_text("id\n../etc\n")
    with pytest.raises(SystemExit):
        report.import_roster(tmp_path / "g", bad)


def test_discover_statuses(tmp_path):
    sub = tmp_path / "submitted"
    (sub / "ok" / NAME).mkdir(parents=True)
    (sub / "ok" / NAME / f"{NAME}.ipynb").write_text(json.dumps({"cells": []}))
    (sub / "renamed" / NAME).mkdir(parents=True)
    (sub / "renamed" / NAME / "copy.ipynb").write_text("{}")
    (sub / "empty" / NAME).mkdir(parents=True)
    (sub / "badjson" / NAME).mkdir(parents=True)
    (sub / "badjson" / NAME / f"{NAME}.ipynb").write_text("{")
    (sub / "wrongfolder" / "attention").mkdir(parents=True)
    (sub / "link" / NAME).mkdir(parents=True)
    os.symlink("/etc/passwd", sub / "link" / NAME / f"{NAME}.ipynb")
    found = {s.student: s for s in grading.discover(sub, [NAME], ["ok", "renamed", "empty", "badjson",
                                                                  "wrongfolder", "link", "absent"])}
    assert found["ok"].status is None and found["ok"].cells == []
    assert found["renamed"].status == grading.MISSING and "copy.ipynb" in found["renamed"].details[0]
    assert found["empty"].status == grading.MISSING
    assert found["badjson"].status == grading.INVALID
    assert found["wrongfolder"].status == grading.MISSING and "attention" in found["wrongfolder"].details[0]
    assert found["link"].status == grading.INVALID
    assert found["absent"].status == grading.NO_SUBMISSION


def test_reference_uses_detected_in_student_cells_only(assignment, released):
    cells = copy.deepcopy(released)
    for cell in cells:
        if cell["nbgrader"].get("grade_id") == "softmax":
            cell["source"] = "from transformer_course import softmax"
        if cell["nbgrader"].get("grade_id") == "sdpa":
            cell["source"] = ("import transformer_course as tc\n"
                              "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
                              "    return tc.attention.scaled_dot_product_attention(Q, K, V, mask)")
    rebuilt, _ = notebooks.rebuild(assignment, cells)
    names = {"softmax", "scaled_dot_product_attention"}
    assert grading.reference_uses(rebuilt, names) == ["softmax", "scaled_dot_product_attention"]
    untouched, _ = notebooks.rebuild(assignment, released)     # the released comparison cell is the course's
    assert grading.reference_uses(untouched, names) == []


# --------------------------------------------------------------------------- LMS collection
@pytest.mark.parametrize("filename,expected", [
    ("alice_01_attention.ipynb", ("alice", NAME)),
    ("alice_correct_01_attention_01_attention.ipynb", ("alice_correct", NAME)),
    ("bob_01_attention (2).ipynb", ("bob", NAME)),
    ("bob_01_attention-1.ipynb", ("bob", NAME)),
    ("carol_01_attention_late.ipynb", ("carol", NAME)),
    ("dave_01_attention.zip", ("dave", NAME)),
    ("dave.ipynb", None),
    ("_01_attention.ipynb", None),
    ("erin_01_attention_notes.ipynb", None),
    ("erin_02_other.ipynb", None),
])
def test_lms_file_names(filename, expected):
    got = collect._match(filename, [NAME], None)
    assert (got[:2] if got else None) == expected


def test_collect_copies_notebooks_and_zips(tmp_path):
    lms = tmp_path / "lms"
    lms.mkdir()
    (lms / "alice_01_attention.ipynb").write_text('{"cells": []}')
    with zipfile.ZipFile(lms / "bob_01_attention.zip", "w") as zf:
        zf.writestr("work/01_attention.ipynb", '{"cells": [1]}')
        zf.writestr("../../escape.ipynb", "x")
    (lms / "readme.txt").write_text("x")
    matches, skipped = collect.collect(lms, tmp_path / "submitted", [NAME])
    assert [(m.student, m.assignment) for m in matches] == [("alice", NAME), ("bob", NAME)]
    assert (tmp_path / "submitted" / "bob" / NAME / f"{NAME}.ipynb").read_text() == '{"cells": [1]}'
    assert [s.split(" (")[0] for s in skipped] == ["readme.txt"] and "does not match" in skipped[0]
    assert not (tmp_path / "escape.ipynb").exists()
    custom, _ = collect.plan(lms, [NAME], r"(?P<student>[a-z]+)_(?P<assignment>01_attention)\.ipynb")
    assert [m.student for m in custom] == ["alice"]


def test_collect_goes_on_after_an_unreadable_zip_member(tmp_path):
    """A member with a compression method Python cannot read (issue 12) is skipped with a reason;
    the files after it are still collected."""
    lms = tmp_path / "lms"
    lms.mkdir()
    with zipfile.ZipFile(lms / "amy_01_attention.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("01_attention.ipynb", '{"cells": []}' * 10)
    raw = bytearray((lms / "amy_01_attention.zip").read_bytes())
    for sig, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):      # method field: 8 (deflate) -> 6 (implode)
        at = raw.index(sig)
        raw[at + offset:at + offset + 2] = (6).to_bytes(2, "little")
    (lms / "amy_01_attention.zip").write_bytes(bytes(raw))
    (lms / "zoe_01_attention.ipynb").write_text('{"cells": []}')
    matches, skipped = collect.collect(lms, tmp_path / "submitted", [NAME])
    assert [m.student for m in matches] == ["zoe"]
    assert len(skipped) == 1 and skipped[0].startswith("amy_01_attention.zip") and "cannot be read" in skipped[0]
    assert (tmp_path / "submitted" / "zoe" / NAME / f"{NAME}.ipynb").exists()
    assert not list((tmp_path / "submitted" / "amy").rglob("*.ipynb"))


def test_collect_does_not_write_through_a_symlinked_student_folder(tmp_path):
    lms = tmp_path / "lms"
    lms.mkdir()
    (lms / "eve_01_attention.ipynb").write_text('{"cells": []}')
    (tmp_path / "submitted").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "submitted" / "eve").symlink_to(tmp_path / "elsewhere")
    matches, skipped = collect.collect(lms, tmp_path / "submitted", [NAME])
    assert matches == [] and "symbolic link" in skipped[0]
    assert not list((tmp_path / "elsewhere").rglob("*"))


def test_discover_does_not_follow_a_symlinked_student_folder(tmp_path):
    sub = tmp_path / "submitted"
    (sub / "alice" / NAME).mkdir(parents=True)
    (sub / "alice" / NAME / f"{NAME}.ipynb").write_text('{"cells": []}')
    (sub / "mallory").symlink_to(sub / "alice")
    found = {s.student: s for s in grading.discover(sub, [NAME], ["alice", "mallory"])}
    assert found["alice"].status is None
    assert found["mallory"].status == grading.INVALID and "symbolic link" in found["mallory"].details[0]


def test_a_hand_grade_needs_a_submission(tmp_path):
    """No hand grade for a row where nothing was submitted; an old one does not count (issue 12)."""
    grades = tmp_path / "grades"
    (grades / "results" / "s").mkdir(parents=True)
    record = _record(student="s", auto_status=grading.NO_SUBMISSION, auto_points=0.0)
    (grades / "results" / "s" / f"{NAME}.json").write_text(json.dumps(record))
    from grader.__main__ import main

    with pytest.raises(SystemExit, match="no submission"):
        main(["manual", "--grades", str(grades), "--student", "s", "--notebook", NAME,
              "--cell", "written_values", "--points", "1"])
    manual = {("s", NAME, "written_values"): {"points": "2", "comment": "x"}}
    row = report.row_for(record, manual)
    assert (row["points"], row["status"]) == ("0", grading.NO_SUBMISSION)
    html = report.write_feedback(tmp_path, record, row, manual).read_text()
    assert "waiting for a hand grade" not in html and "no submission" in html


def test_table_and_feedback_survive_lone_surrogates_in_records(tmp_path):
    """A record holding a lone surrogate (JSON-escaped by json.dumps) cannot stop the table."""
    grades = tmp_path
    (grades / "results" / "s").mkdir(parents=True)
    record = _record(student="s", details=["bad \ud83d text"])
    (grades / "results" / "s" / f"{NAME}.json").write_text(json.dumps(record))
    rows = report.write_table(grades)
    assert "bad \ufffd text" in rows[0]["details"]
    assert "\ufffd" in (grades / "feedback" / "s" / f"{NAME}.html").read_text(encoding="utf-8")


def test_seccomp_filter_denies_keyrings_and_namespaces():
    """The filter the sandbox installs: add_key/keyctl/unshare/ptrace fail with EPERM, fork and
    threads still work (run in a child process: a filter cannot be removed)."""
    from grader.trusted import seccomp

    if not seccomp.supported():
        pytest.skip("seccomp filter defined for x86_64 and aarch64 only")
    code = (
        "import ctypes, errno, os, sys, threading\n"
        f"sys.path.insert(0, {str(ROOT / 'grader' / 'trusted')!r})\n"
        "import seccomp\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.prctl(38, 1, 0, 0, 0) == 0\n"
        "seccomp.install()\n"
        "nr = seccomp.ARCHES[os.uname().machine][3]\n"
        "out = []\n"
        "for name, args in (('add_key', (b'user', b'k', b'v', 1, ctypes.c_int(-4))), ('keyctl', (0, -4, 0)),\n"
        "                   ('unshare', (0x10000000,)), ('ptrace', (0, 0, 0, 0))):\n"
        "    r = libc.syscall(nr[name], *args)\n"
        "    out.append((name, r, errno.errorcode.get(ctypes.get_errno())))\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "pid = os.fork()\n"
        "os._exit(3) if pid == 0 else out.append(('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))\n"
        "print(out)\n")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert eval(proc.stdout) == [("add_key", -1, "EPERM"), ("keyctl", -1, "EPERM"), ("unshare", -1, "EPERM"),
                                 ("ptrace", -1, "EPERM"), ("fork", 3)]


def test_a_notebook_with_big_outputs_is_read(tmp_path):
    """28 MB of figures: read (outputs dropped), not an invalid file."""
    figure = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * 1_000_000}}
    nb = json.loads((ROOT / "exercises" / NAME / f"{NAME}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = [figure] * 4
    path = tmp_path / "submitted" / "s" / NAME / f"{NAME}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb))
    assert path.stat().st_size > 25 << 20
    (sub,) = grading.discover(tmp_path / "submitted", [NAME], ["s"])
    assert sub.status is None and len(sub.cells) == len(nb["cells"])


def test_the_grader_has_no_import_circles_and_the_trusted_side_never_imports_the_sandboxed():
    """grader/trusted/ and grader/sandboxed/ show the trust boundary (issue 13); no module imports
    one that imports it back, directly or not."""
    import ast as _ast

    graph = {}
    for path in (ROOT / "grader").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
        deps = set()
        for node in _ast.walk(_ast.parse(path.read_text())):
            if isinstance(node, _ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                deps |= {f"{target}.{a.name}" for a in node.names} | {target}
            elif isinstance(node, _ast.ImportFrom) and (node.module or "").startswith("grader"):
                deps |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[module.removesuffix(".__init__")] = deps
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    assert not any(d.startswith("grader.sandboxed") for m, deps in graph.items() if ".trusted" in m for d in deps)

    def reaches(start, goal, seen=()):
        return any(d == goal or (d not in seen and reaches(d, goal, (*seen, d))) for d in graph[start])

    circles = sorted(m for m in graph if reaches(m, m))
    assert circles == [], circles


def test_package_rule_on_a_package_laid_out_otherwise(tmp_path):
    """The rule reads imports, not file names: `from . import sub` in __init__, a second package in
    lib/ (e.g. fast attention moved out), absolute imports between them."""
    lib = tmp_path / "lib"
    (lib / "course").mkdir(parents=True)
    (lib / "course_fast").mkdir()
    (lib / "course" / "__init__.py").write_text("from . import basics, extra\nfrom .basics import f\n"
                                                 "from course_fast import fast\n__all__ = ['f', 'fast']\n")
    (lib / "course" / "basics.py").write_text("def f(x):\n    return x + 1\n")
    (lib / "course" / "extra.py").write_text("def g(x):\n    return 2 * x\n")
    (lib / "course_fast" / "__init__.py").write_text("from .impl import fast\n")
    (lib / "course_fast" / "impl.py").write_text("from course.basics import f\n\ndef fast(x):\n    return f(x)\n")
    a = notebooks.Assignment("01_x", tmp_path, [notebooks.SourceCell(0, "code", "from course import f\nf(1)",
                                                                     None, "plain")], [], [], {})
    plan = package.plan_for(a, lib)
    assert plan.modules == {"course", "course.basics"}
    assert {"course.extra", "course_fast", "course_fast.impl"} <= plan.absent and "fast" in plan.unavailable
    dest = package.build_sandbox_package(lib, tmp_path / "pkg", plan, "01_x")
    out = _run_with_package(dest, "import course\nassert course.f(1) == 2\n"
                                  "try:\n    course.fast\nexcept AttributeError as e:\n    print('absent:', e)\n")
    assert out.returncode == 0 and "not available while grading 01_x" in out.stdout, out.stderr


def test_stripped_metadata_tests_run_where_they_were_not_after_a_scratch_cell(assignment):
    """Every cell's metadata stripped and a scratch cell at the end that redefines the attention:
    the re-inserted test cells run right after the student's answers, before the scratch cell, and
    the answer (not the scratch) is matched as the solution (issue 12: honest work scored 2/5)."""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import make_demo_class as demo

    released = json.loads((ROOT / "exercises" / NAME / f"{NAME}.ipynb").read_text())
    nb = demo.build_notebook(released, demo.STUDENTS["jan_scratch_after_answer"])
    student = [{"cell_type": c["cell_type"], "source": "".join(c["source"]), "nbgrader": {}} for c in nb["cells"]]
    cells, notes = notebooks.rebuild(assignment, student)
    order = [(c.kind, c.grade_id) for c in cells if c.kind in ("solution", "test")]
    assert order == [("solution", "softmax"), ("test", "test_softmax"), ("solution", "sdpa"), ("test", "test_sdpa"),
                     ("solution", "lookup_query"), ("test", "test_lookup_query")]
    scratch = next(i for i, c in enumerate(cells) if "# scratch: trying something" in c.source)   # jan's, appended
    assert scratch == len(cells) - 1
    assert max(i for i, c in enumerate(cells) if c.kind == "test") < scratch
    sdpa = next(c for c in cells if c.grade_id == "sdpa")
    assert "np.sqrt(Q.shape[-1])" in sdpa.source          # the answer, not the scratch (scaled by d_k)


def test_helpers_a_solution_defines_inside_its_function_are_blocked_too():
    """Notebook 07's encode_long_document splits into document_windows and max_context_owner, defined
    inside the solution; the package's functions of those names would hand a student the hard part."""
    from transformer_course_cases import CASES

    a = notebooks.load_assignment(ROOT / "notebooks", "07_pretrained_minilm", CASES, ROOT / "exercises")
    blocked = {n for _, n in package.plan_for(a, ROOT / "lib").blocked}
    assert {"encode_long_document", "document_windows", "max_context_owner"} <= blocked, blocked
