"""nbgrader configuration for the course (instructor side).

Sources live in notebooks/<assignment>/<assignment>.ipynb, student versions are
released to exercises/, executed complete notebooks go to solutions/.
"""

import atexit
import os
import shutil
import tempfile
import uuid

from jupyter_core.paths import jupyter_runtime_dir

c = get_config()  # noqa: F821  (provided by traitlets)

ROOT = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "transformer-first-principles"
c.CourseDirectory.source_directory = "notebooks"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.solution_directory = "solutions"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(ROOT, ".nbgrader", "gradebook.db")
# Only notebooks are course material; theory.md and figures stay out of the release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.md"]

# Student stubs.
# A stub that says what to do when it runs: the traceback names the function, the message says where
# its specification is.
c.ClearSolutions.code_stub = {"python": (
    "# YOUR CODE HERE\n"
    'raise NotImplementedError("not written yet: replace this line with your code; the docstring above '
    'gives the inputs, outputs and shapes, the Exercise text before this cell the idea")'
)}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Kernels started by nbgrader (validate, generate_solution, autograde) talk over IPC sockets in Jupyter's runtime
# folder (only this user can open it) instead of TCP on 127.0.0.1, under a name of their own (tools/course.py,
# KERNEL_TRANSPORT; the release writes the student's nbgrader_config.py with the same lines beside every notebook).
# A socket's path holds at most 107 bytes: a runtime folder with a long path is replaced by a private temporary one.
runtime = jupyter_runtime_dir()
if len(runtime) > 64:
    runtime = tempfile.mkdtemp(prefix="kernel-")
    atexit.register(shutil.rmtree, runtime, True)
os.makedirs(runtime, mode=0o700, exist_ok=True)
c.KernelManager.transport = "ipc"
c.KernelManager.ip = os.path.join(runtime, f"kernel-{uuid.uuid4().hex[:12]}")

# Execution limits used by validate and autograde.
c.Execute.timeout = 60
c.Execute.record_timing = False

# The course grades with its own sandboxed grader (grader/, `make grade`), which never runs
# student code in an nbgrader kernel. Should anyone run `nbgrader autograde` directly, these
# are the settings trying it showed to be needed:
c.OverwriteCells.add_missing_cells = True          # deleted / metadata-stripped test cells come back
c.IgnorePattern.enabled = True                     # a warning on stderr must not zero a test cell
c.IgnorePattern.pattern = r".*(Warning|warn)\b.*"
c.CourseDirectory.max_file_size = 10_000           # kB per file copied into a submission
c.CourseDirectory.max_dir_size = 100_000           # kB per submission folder
