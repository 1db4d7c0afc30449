"""nbgrader settings for a student's Validate (written by the course's release: tools/course.py)."""

import os
import uuid

from jupyter_core.paths import jupyter_runtime_dir

c = get_config()  # noqa: F821

# The kernel talks to nbgrader over IPC sockets in Jupyter's runtime folder (only this user can open it), not over TCP
# on 127.0.0.1, under a name of its own.
c.KernelManager.transport = "ipc"
os.makedirs(jupyter_runtime_dir(), mode=0o700, exist_ok=True)
c.KernelManager.ip = os.path.join(jupyter_runtime_dir(), f"kernel-{uuid.uuid4().hex[:12]}")
