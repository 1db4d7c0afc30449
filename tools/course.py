"""Build and check the course's generated notebooks.

    python tools/course.py release     # notebooks/ -> exercises/   (nbgrader generate_assignment), and the rule
    python tools/course.py rule        # notebooks/ -> lib/transformer_course/exercise_rule.json (exercise_rule.py)
    python tools/course.py solutions   # notebooks/ -> solutions/   (markers and hidden tests removed, executed)
    python tools/course.py all         # both

The sources in notebooks/<NN_name>/<NN_name>.ipynb are the only thing edited by
hand; exercises/ and solutions/ are rebuilt from them and committed so that a
student or reader sees them without installing anything. tests/test_pipeline.py
fails when a committed copy is stale.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "notebooks"
EXERCISES = ROOT / "exercises"
SOLUTIONS = ROOT / "solutions"
BIN = Path(sys.executable).parent

HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
MARK_SCHEME = re.compile(r"^=== BEGIN MARK SCHEME ===.*?^=== END MARK SCHEME ===[ \t]*\n?", re.S | re.M)


def assignments() -> list[str]:
    """Assignment names, in order: every notebooks/NN_name/NN_name.ipynb."""
    names = sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and re.match(r"\d\d_", p.name))
    for name in names:
        if not (SOURCE / name / f"{name}.ipynb").exists():
            raise SystemExit(f"notebooks/{name}/ must contain {name}.ipynb")
    return names


def nbgrader_env() -> dict:
    env = dict(os.environ)
    # A fresh gradebook runs `alembic` from PATH: use the environment's own.
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


SHARED_FILES = ["theory.md"]   # notebooks/ files that sit next to the notebooks (links: ../theory.md)
INSTRUCTOR_FILES = ["GUIDE.md"]  # notebooks/ files for instructors and readers: solutions/ (and the site), never exercises/

# theory.md collapses what answers an exercise as <details><summary>... (after notebook NN, ...)</summary>.
# A collapsed block hides nothing in a text editor (JupyterLab opens .md files as text), so the student
# release keeps the summary line and leaves the body out; solutions/ (and the site) keep it whole.
ANSWER_BLOCK = re.compile(r"(<details><summary>[^<]*\(after notebook (\d+)[^<]*</summary>)(.*?)(</details>)", re.S)


def student_text(name: str, text: str) -> str:
    """A shared file as the student release holds it: theory.md without the bodies of its answer blocks."""
    if name != "theory.md":
        return text
    # One plain line says what is withheld (a collapsed block holding only a placeholder would read as a promise).
    def withheld(m):
        summary = re.sub(r"<[^>]+>", "", m.group(1)).strip()
        return (f"*Withheld from the student release: “{summary}”. "
                f"After you hand notebook {m.group(2)} in, read it on the theory page of the course's solutions.*")
    return ANSWER_BLOCK.sub(withheld, text)


def copy_shared(dest: Path, *, student: bool) -> None:
    """Copy theory.md (and any other shared file) from notebooks/ into ``dest``; for the student release
    (``student=True``) without the answers (:func:`student_text`)."""
    for name in SHARED_FILES:
        src = SOURCE / name
        if src.exists():
            dest.mkdir(parents=True, exist_ok=True)
            text = src.read_text(encoding="utf-8")
            (dest / name).write_text(student_text(name, text) if student else text, encoding="utf-8")


def copy_instructor_files(dest: Path) -> None:
    """Copy the instructor's guide (notebooks/GUIDE.md) into ``dest`` (solutions/); the release never gets it."""
    for name in INSTRUCTOR_FILES:
        src = SOURCE / name
        if src.exists():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / name)


# The Jupyter kernels the course starts on this machine (solutions, the pipeline tests, nbgrader, nbval, JupyterLab)
# talk to their client over IPC sockets in Jupyter's runtime folder (which only its user can open), not over TCP on
# 127.0.0.1: no port another user of the host can reach, and no "Kernel is running over TCP without encryption"
# warning at every start. The sockets get an absolute name of their own: jupyter_client's default for IPC is the
# relative "kernel-ipc", which the kernel (started in the notebook's folder) and its client (in another working
# folder) would resolve to two different places.
KERNEL_TRANSPORT = "ipc"


def ipc_runtime_dir() -> str:
    """Jupyter's runtime folder (created, mode 0700), or, when its path is too long for a socket's name (a Unix
    socket's path holds at most 107 bytes: a deep home folder, a test's temporary home), a private folder of
    its own in the system's temporary folder, removed when this process ends."""
    import atexit
    import tempfile

    from jupyter_core.paths import jupyter_runtime_dir

    runtime = jupyter_runtime_dir()
    if len(runtime) > 64:
        runtime = tempfile.mkdtemp(prefix="kernel-")
        atexit.register(shutil.rmtree, runtime, True)
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    return runtime


def ipc_prefix() -> str:
    """A fresh absolute name for a kernel's IPC sockets (ipc_runtime_dir)."""
    import uuid

    return os.path.join(ipc_runtime_dir(), f"kernel-{uuid.uuid4().hex[:12]}")


def kernel_config():
    """The traitlets configuration every locally started kernel gets (NotebookClient(..., config=...))."""
    from traitlets.config import Config

    config = Config()
    config.KernelManager.transport = KERNEL_TRANSPORT
    config.KernelManager.ip = ipc_prefix()
    return config


# nbgrader's kernels get the same two settings from an nbgrader_config.py: the course's own (the repository's root)
# and the student's, which the release writes beside every notebook: nbgrader looks for one in the working folder
# and warns "No nbgrader_config.py file found" when there is none. The student's holds only this (and Validate's log
# level): nbgrader's defaults (30 s per cell, ...) stay as they are for a student's Validate.
STUDENT_CONFIG = '''"""nbgrader settings for a student's Validate (written by the course's release: tools/course.py)."""

import atexit
import os
import shutil
import tempfile
import uuid

from jupyter_core.paths import jupyter_runtime_dir

c = get_config()  # noqa: F821

# The kernel talks to nbgrader over IPC sockets in Jupyter's runtime folder (only this user can open it), not over TCP
# on 127.0.0.1, under a name of its own; a socket's path holds at most 107 bytes, so a runtime folder with a long
# path is replaced by a private folder in the system's temporary folder.
runtime = jupyter_runtime_dir()
if len(runtime) > 64:
    runtime = tempfile.mkdtemp(prefix="kernel-")
    atexit.register(shutil.rmtree, runtime, True)
os.makedirs(runtime, mode=0o700, exist_ok=True)
c.KernelManager.transport = "ipc"
c.KernelManager.ip = os.path.join(runtime, f"kernel-{uuid.uuid4().hex[:12]}")

# Validate prints its verdict; nbgrader then logs "[ValidateApp | INFO] Validating '<path>'" on stderr, which tells a
# student nothing: its log shows warnings and errors only.
c.ValidateApp.log_level = "WARN"
'''


def generate_assignments(names: list[str], root: Path = ROOT) -> None:
    """Run nbgrader generate_assignment (one call for the whole course: nbgrader starts once)."""
    patterns = ["*"] if sorted(names) == assignments() else names
    for pattern in patterns:
        subprocess.run([str(BIN / "nbgrader"), "generate_assignment", pattern, "--force", "--log-level=ERROR"],
                       cwd=root, env=nbgrader_env(), check=True)


RAISES = "raises-exception"


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell reads, names it binds): IPython syntax (%magics) is turned into Python first."""
    from IPython.core.inputtransformer2 import TransformerManager

    tree = ast.parse(TransformerManager().transform_cell(source))
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return read, bound


def tag_cells_that_run_student_code(nb) -> list[int]:
    """Tag `raises-exception` on every code cell that uses, directly or through a variable computed
    from it, a function the student writes. In the released stubs such a cell raises the stub's
    NotImplementedError; with the tag, Jupyter's Run All goes on past it, so every cell that does
    not depend on an unfinished exercise still runs. Returns the tagged cells' indices."""
    from_student, tagged = set(), []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        read, bound = _names(cell.source)
        if meta.get("solution") and not meta.get("grade"):
            from_student |= bound                      # the student's own definitions
            continue
        if read & from_student:
            tags = cell.metadata.setdefault("tags", [])
            if RAISES not in tags:
                tags.append(RAISES)
            tagged.append(i)
            from_student |= bound
        else:
            from_student -= bound                      # rebound from code that needs no exercise
    return tagged


SCRATCH = "scratch"


def tag_scratch_cells(nb) -> list[int]:
    """A scratch cell (tagged `scratch` in the source: where a written question asks the student to compute or
    print) runs the student's own trial code: tagged `raises-exception` too, so that an error there does not stop
    Run All before the later exercises."""
    tagged = []
    for i, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and SCRATCH in tags:
            if RAISES not in tags:
                tags.append(RAISES)
            tagged.append(i)
    return tagged


def finish_release(path: Path) -> None:
    """What nbgrader's release does not do: the Run-All tags above (written in nbformat's layout), and the
    student's nbgrader_config.py beside the notebook (Validate finds it in the notebook's folder)."""
    nb = nbformat.read(path, as_version=4)
    tag_cells_that_run_student_code(nb)
    tag_scratch_cells(nb)
    nbformat.write(nb, path)
    (path.parent / "nbgrader_config.py").write_text(STUDENT_CONFIG, encoding="utf-8")


def code_stub() -> str:
    """The stub nbgrader_config.py puts in place of a solution (the tests build stubs with it too)."""
    from traitlets.config import Config

    config = Config()
    exec(compile((ROOT / "nbgrader_config.py").read_text(), "nbgrader_config.py", "exec"),
         {"get_config": lambda: config, "__file__": str(ROOT / "nbgrader_config.py")})
    return config.ClearSolutions.code_stub["python"]


def release(names: list[str]) -> None:
    """Student versions via nbgrader (stubs replace solutions, hidden tests removed)."""
    (ROOT / ".nbgrader").mkdir(exist_ok=True)
    copy_shared(EXERCISES, student=True)
    (EXERCISES / "nbgrader_config.py").write_text(STUDENT_CONFIG, encoding="utf-8")   # Validate run from exercises/
    t0 = time.perf_counter()
    generate_assignments(names)
    for name in names:
        released = EXERCISES / name / f"{name}.ipynb"
        if not released.exists():
            raise SystemExit(f"nbgrader did not write {released}")
        finish_release(released)
        print(f"released   {released.relative_to(ROOT)}")
    print(f"released {len(names)} notebook(s) in {time.perf_counter() - t0:.1f} s")
    rule()


RULE_FILE = ROOT / "lib" / "transformer_course" / "exercise_rule.json"


def rule() -> None:
    """lib/transformer_course/exercise_rule.json: what the grader's package rule decides for every notebook, which
    the student's kernel reads to hold the exercises to the rule the grader applies (exercise_rule.py)."""
    sys.path.insert(0, str(ROOT))
    from grader.trusted.package import rule_text

    text = rule_text(ROOT)
    if not RULE_FILE.exists() or RULE_FILE.read_text(encoding="utf-8") != text:
        RULE_FILE.write_text(text, encoding="utf-8")
        print(f"wrote      {RULE_FILE.relative_to(ROOT)}")


def solution_notebook(source: Path):
    """The source notebook without solution markers, hidden tests or mark schemes (not executed)."""
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        text = cell.source
        if cell.cell_type == "code":
            text = HIDDEN_BLOCK.sub("", text)
            text = SOLUTION_MARKER.sub("", text)
        else:
            text = MARK_SCHEME.sub("", text)
        cell.source = text.rstrip("\n")
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.cells = [c for c in nb.cells if c.source.strip()]
    return nb


def execute(nb, cwd: Path, timeout: int = 300):
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}}, config=kernel_config())
    client.execute()
    return nb


def error_outputs(nb) -> list[str]:
    """Descriptions of every error output in a notebook."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return found


def merge_streams(nb):
    """Consecutive stdout (or stderr) outputs of a cell as one: the kernel splits a cell's
    printing into chunks at moments that vary from run to run, so without this the
    committed solutions would change on every rebuild although the text is the same."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if (out.get("output_type") == "stream" and prev is not None
                    and prev.get("output_type") == "stream" and prev.get("name") == out.get("name")):
                prev["text"] = prev["text"] + out["text"]
            else:
                merged.append(out)
        if cell.cell_type == "code":
            cell.outputs = merged
    return nb


# When is a re-drawn figure "the same picture"? A plotted value that moves by round-off (another BLAS
# kernel, another thread count) shifts an antialiased edge by far less than a pixel, so the 8-bit
# values of some edge pixels change by a level, or a few where strokes overlap. Measured under
# OPENBLAS_CORETYPE=Sandybridge against the committed figures: at most 33 pixels by 1 level (01, 02)
# and 65 of 373,632 pixels by at most 4 levels (07). Anything that moves visibly changes a block of
# pixels by far more (bars drawn at round-off height: 390 pixels by 224 levels), and is written.
PICTURE_MAX_LEVELS = 8              # of 255, per channel
PICTURE_MAX_PIXELS = 0.002          # share of the image's pixels that may differ at all


def same_picture(png_a: str, png_b: str) -> bool:
    """Whether two base64 PNGs (a notebook's image/png) show the same picture up to
    antialiasing noise: same size, no pixel off by more than PICTURE_MAX_LEVELS, and at
    most PICTURE_MAX_PIXELS of them different at all."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    if png_a == png_b:
        return True
    a, b = (np.asarray(Image.open(io.BytesIO(base64.b64decode(p))).convert("RGBA"), dtype=np.int16)
            for p in (png_a, png_b))
    if a.shape != b.shape:
        return False
    diff = np.abs(a - b).max(axis=-1)                                # (height, width)
    return bool(diff.max() <= PICTURE_MAX_LEVELS and (diff > 0).mean() <= PICTURE_MAX_PIXELS)


def same_cells(new, old):
    """(new cell, old cell) for every code cell of `new` whose source a code cell of `old` has, matched in order
    (the k-th cell with a given source to the k-th one): a cell added or removed elsewhere moves the others without
    unpairing them."""
    unused = {}
    for before in old.cells:
        if before.cell_type == "code":
            unused.setdefault(before.source, []).append(before)
    for cell in new.cells:
        if cell.cell_type == "code" and unused.get(cell.source):
            yield cell, unused[cell.source].pop(0)


def keep_unchanged_figures(new, old) -> int:
    """Give `new` (just executed) the committed PNG bytes of every figure that is the same
    picture in `old`, cell by cell where the source and the output kinds match, so that `make`
    on another machine leaves the committed solutions as they are. Text outputs are never
    touched: they must come out identical everywhere (nbval checks that). Returns the count."""
    kept = 0
    for cell, before in same_cells(new, old):
        if len(before.outputs) != len(cell.outputs):
            continue
        for out, prev in zip(cell.outputs, before.outputs):
            png, prev_png = out.get("data", {}).get("image/png"), prev.get("data", {}).get("image/png")
            if png and prev_png and png != prev_png and same_picture(png, prev_png):
                out["data"]["image/png"] = prev_png
                kept += 1
    return kept


SANITIZE_CFG = ROOT / "tools" / "nbval-sanitize.cfg"


def sanitizers(path: Path = SANITIZE_CFG) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file: what legitimately differs between runs."""
    pairs, regex = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("regex:"):
            regex = line[len("regex:"):].strip()
        elif line.startswith("replace:") and regex is not None:
            pairs.append((re.compile(regex), line[len("replace:"):].strip()))
            regex = None
    return pairs


def sanitize(text: str, pairs) -> str:
    for regex, replacement in pairs:
        text = regex.sub(replacement, text)
    return text


def keep_unchanged_measurements(new, old) -> int:
    """Give `new` the committed text of every output that differs only in what nbval does not compare: a
    cell tagged nbval-ignore-output (a speed measured on the machine, e.g. notebook 09's Coda) keeps its
    committed outputs whole, and a text that is the same after nbval's sanitizers (timings, their shares)
    keeps its committed digits. So `make` leaves the committed solutions as they are on any machine and
    under any load; the committed numbers are those of the run that was committed. Returns the count."""
    pairs, kept = sanitizers(), 0
    for cell, before in same_cells(new, old):
        if [o.output_type for o in before.outputs] != [o.output_type for o in cell.outputs]:
            continue
        if "nbval-ignore-output" in cell.metadata.get("tags", []):
            if cell.outputs != before.outputs:
                cell.outputs = copy.deepcopy(before.outputs)
                kept += 1
            continue
        for out, prev in zip(cell.outputs, before.outputs):
            text, prev_text = out.get("text"), prev.get("text")
            if (isinstance(text, str) and isinstance(prev_text, str) and text != prev_text
                    and sanitize(text, pairs) == sanitize(prev_text, pairs)):
                out["text"] = prev_text
                kept += 1
    return kept


def solutions(names: list[str]) -> None:
    """Executed complete notebooks: what a reader sees and what nbval re-checks."""
    copy_shared(SOLUTIONS, student=False)
    copy_instructor_files(SOLUTIONS)
    for name in names:
        t0 = time.perf_counter()
        nb = solution_notebook(SOURCE / name / f"{name}.ipynb")
        dest_dir = SOLUTIONS / name
        dest_dir.mkdir(parents=True, exist_ok=True)
        nb = execute(nb, dest_dir)
        errors = error_outputs(nb)
        if errors:
            raise SystemExit(f"{name}: the solution raised errors:\n" + "\n".join(errors))
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        dest = dest_dir / f"{name}.ipynb"
        nb = merge_streams(nb)
        old = nbformat.read(dest, as_version=4) if dest.exists() else None
        kept = keep_unchanged_figures(nb, old) if old else 0
        measured = keep_unchanged_measurements(nb, old) if old else 0
        nbformat.write(nb, dest)
        note = f", {kept} figure(s) the same picture up to antialiasing: kept as committed" if kept else ""
        note += f", {measured} measured output(s) nbval does not compare: kept as committed" if measured else ""
        print(f"solutions  {dest.relative_to(ROOT)}  ({time.perf_counter() - t0:.1f} s{note})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["release", "rule", "solutions", "all"])
    parser.add_argument("names", nargs="*", help="assignments (default: all)")
    args = parser.parse_args(argv)
    names = args.names or assignments()
    if args.step in ("release", "all"):
        release(names)
    if args.step == "rule":
        rule()
    if args.step in ("solutions", "all"):
        solutions(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
