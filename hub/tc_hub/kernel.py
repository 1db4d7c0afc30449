"""The hub's Python kernel: ipykernel with no TCP socket of its own (``python -m tc_hub.kernel -f FILE``).

With ``KernelManager.transport = "ipc"`` a kernel's five channels are Unix sockets in the user's
runtime folder. ipykernel (7.4) still opens two TCP ports on 127.0.0.1 that every local user can
connect to:

* the IOPub *pipe*, through which processes the kernel forks send their output (a PULL socket;
  a message is taken only with a random 16-byte key, but anyone can connect and flood it): here
  it is an IPC socket in the runtime folder, like the channels;
* the debugger: when the Lab's debugger is switched on, the kernel runs ``debugpy.listen`` on a
  TCP port, and debugpy's adapter asks a connecting client for no credential -- another user
  could attach and run code in the kernel. debugpy is reported unavailable here: the Lab shows
  no debugger on the hub (on a laptop, ``make lab``, it is there).

The hub's kernelspec ``python3`` (hubctl.install_roles writes it into the venv's share/tc-hub,
on the servers' JUPYTER_PATH) runs this module instead of ``ipykernel_launcher``.
"""

from __future__ import annotations

import atexit
import os
import sys
import uuid
from pathlib import Path


def _setup_pipe_in(self):
    import zmq
    from ipykernel import iostream
    from jupyter_core.paths import jupyter_runtime_dir

    ctx = self.socket.context
    self._pipe_uuid = os.urandom(16)
    runtime = jupyter_runtime_dir()
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    path = os.path.join(runtime, f"iopub-pipe-{uuid.uuid4().hex[:12]}")
    self._pipe_endpoint = f"ipc://{path}"
    pipe_in = ctx.socket(zmq.PULL)
    pipe_in.linger = 0
    pipe_in.bind(self._pipe_endpoint)
    master = os.getpid()
    atexit.register(lambda: os.getpid() == master and os.path.exists(path) and os.unlink(path))
    self._pipe_in = iostream.ZMQStream(pipe_in, self.io_loop)
    self._pipe_in.on_recv(self._handle_pipe_msg)


def _setup_pipe_out(self):
    import zmq

    ctx = zmq.Context()                    # a new context after fork, as ipykernel's own
    pipe_out = ctx.socket(zmq.PUSH)
    pipe_out.linger = 3000
    pipe_out.connect(self._pipe_endpoint)
    return ctx, pipe_out


def patch() -> None:
    from ipykernel import debugger, iostream

    iostream.IOPubThread._setup_pipe_in = _setup_pipe_in
    iostream.IOPubThread._setup_pipe_out = _setup_pipe_out
    debugger._is_debugpy_available = False


if __name__ == "__main__":
    # as ipykernel_launcher: the notebook's folder leaves sys.path while the kernel loads (IPython adds it back)
    if sys.path[0] == "" or Path(sys.path[0]) == Path.cwd():
        del sys.path[0]
    patch()
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
