"""Kernels on IPC sockets in the user's own runtime folder (hub/README.md, "Kernels").

jupyter_client's default transport is TCP on 127.0.0.1: on a shared host every user can list the
ports (/proc/net/tcp) and subscribe to any kernel's iopub socket, which accepts every local
subscriber (only messages *to* a kernel are signed): a classmate's code and output, live.
``KernelManager.transport = "ipc"`` (the roles' jupyter_config.json and nbgrader_config.py)
puts the five sockets in the user's runtime folder, 0700, where no other user can connect.

A server's kernels name their sockets after their connection file, already in that folder.
nbgrader's Validate (nbclient) starts a kernel without a connection file: jupyter_client would
then put the sockets in the notebook's folder ("kernel-ipc-N", relative) and the connection
file in /tmp. This manager puts both in the runtime folder, under a name of their own.
"""

from __future__ import annotations

import os
import uuid

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import default


class RuntimeDirKernelManager(AsyncKernelManager):
    @default("transport")
    def _transport_default(self):
        return "ipc"

    @default("connection_file")
    def _connection_file_default(self):
        runtime = jupyter_runtime_dir()
        os.makedirs(runtime, mode=0o700, exist_ok=True)
        return os.path.join(runtime, f"kernel-{uuid.uuid4()}.json")
