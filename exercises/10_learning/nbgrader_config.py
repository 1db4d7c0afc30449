"""nbgrader settings for a student's Validate (written by the course's release: tools/course.py)."""

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
