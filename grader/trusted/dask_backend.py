"""Run the grader's sandboxes on a Dask cluster: ``python -m grader grade --scheduler ADDRESS``.

Only one step of grading moves: the sandbox run of one rebuilt notebook
(``supervisor.run_in_sandbox``). Everything that decides a grade stays on the trusted
side, in the ``python -m grader grade`` process, exactly as in a local run:

    trusted side (grading.py)                      a Dask worker (this module)
    -------------------------                      ---------------------------
    rebuild the notebook from the source
    derive the seed, draw the inputs,
    compute the references (kept here)
    job + inputs + submission files  ---------->   unpack into a root-only folder
    + the sandbox's package copy (once)            run_in_sandbox: the worker's own zygote and
                                                   sandbox user, namespaces, limits (supervisor.py, sandbox_users.py)
    compare the exports with the references <----  Execution + exported files (bytes, read
    score, feedback, table                         after the sandbox is dead, bounded)

The worker never sees the seed or a reference: it receives what the sandbox would see
anyway (the job, the drawn inputs, the submission) and returns what the sandbox exported.
A worker must run as root on a machine with the grader's Debian tools (util-linux,
passwd), like the local grader; each worker process holds a run-owned sandbox slot
(``sandbox_users.allocate_users``: a lock under /run, user ``tcsandboxN``, shared with no other run
on that machine) and grades with its own warm zygote.

The scheduler's address is the only change between a LocalCluster on this machine
(``tests/test_grader_dask.py``) and a dask-jobqueue or Kubernetes cluster elsewhere; the
workers there need this repository's ``grader`` package and the course environment at
the same path (the sandbox bind-mounts the worker's own venv, ``sys.prefix``).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

from . import sandbox_users, supervisor

PLUGIN_NAME = "course-grader-sandbox"


# --------------------------------------------------------------------------- folders as bytes
def pack(folder: Path) -> bytes:
    """An uncompressed tar of ``folder``'s regular files and folders (no links), modes kept."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if folder.exists():
            for path in sorted(folder.rglob("*")):
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def unpack(data: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")           # regular files and folders only, inside dest


# --------------------------------------------------------------------------- the worker side
class WorkerSandbox:
    """What one worker process needs to run sandboxes: a slot, its user, a warm zygote."""

    def __init__(self) -> None:
        problem = supervisor.sandbox_problem()
        if problem:
            raise RuntimeError(f"this Dask worker cannot grade: {problem}")
        # The same run-owned slots as a local grading run (sandbox_users.allocate_users): no other run
        # on this machine, local or a worker, uses this uid while the worker holds it.
        self._held = sandbox_users.allocate_users(1)
        self.user = self._held.users[0]
        self.slot = int(self.user[0].removeprefix(sandbox_users.USER_PREFIX))
        self.run_dir = Path(tempfile.mkdtemp(prefix="tc-grader-dask-"))
        os.chmod(self.run_dir, 0o700)
        self.font_cache = supervisor.font_cache_file()
        self.zygote = supervisor.Zygote(self.run_dir, self.slot, self.font_cache)
        self.packages: dict[str, Path] = {}
        self.lock = threading.Lock()                  # one sandbox at a time per worker process
        self.jobs = 0

    def package(self, digest: str, blob: bytes) -> Path:
        if digest not in self.packages:
            dest = self.run_dir / f"pkg-{digest[:16]}"
            unpack(blob, dest)
            for path in [dest, *dest.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            self.packages[digest] = dest
        return self.packages[digest]

    def run(self, payload: dict):
        with self.lock:
            if self.zygote.proc.poll() is not None:       # a zygote in doubt is replaced
                self.zygote.close()
                self.jobs += 1
                self.zygote = supervisor.Zygote(self.run_dir, self.slot + 100 * self.jobs, self.font_cache)
            pkg_dir = self.package(payload["pkg_digest"], payload["pkg"])
            job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=self.run_dir))
            try:
                unpack(payload["inputs"], job_dir / "inputs")
                unpack(payload["files"], job_dir / "files")
                return supervisor.run_in_sandbox(job=payload["job"], job_dir=job_dir, pkg_dir=pkg_dir, user=self.user,
                                              limits=payload["limits"], venv=Path(sys.prefix), zygote=self.zygote,
                                              data=tuple(payload.get("data", ())))
            finally:
                shutil.rmtree(job_dir, ignore_errors=True)

    def close(self) -> None:
        self.zygote.close()
        sandbox_users.kill_user_processes(self.user[1])
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self._held.release()


try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:                                   # distributed is only needed with --scheduler
    WorkerPlugin = object


class SandboxPlugin(WorkerPlugin):
    """Registered by the trusted side: each worker builds its WorkerSandbox in its event-loop
    thread, which lives as long as the worker (the zygote's parent-death signal follows the
    thread that started it)."""

    name = PLUGIN_NAME

    def setup(self, worker) -> None:
        if not hasattr(worker, "course_grader_sandbox"):
            worker.course_grader_sandbox = WorkerSandbox()

    def teardown(self, worker) -> None:
        box = getattr(worker, "course_grader_sandbox", None)
        if box is not None:
            box.close()
            del worker.course_grader_sandbox


def run_job(payload: dict):
    """The task a worker runs: one sandboxed notebook; returns (Execution, exported files, refused)."""
    from distributed import get_worker

    return get_worker().course_grader_sandbox.run(payload)


# --------------------------------------------------------------------------- the trusted side
class RemoteSandbox:
    """A stand-in for ``supervisor.run_in_sandbox`` that runs each job on the cluster at ``address``."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        from distributed import Client

        self.client = Client(address, timeout=timeout)
        self.client.register_plugin(SandboxPlugin(), name=PLUGIN_NAME)
        self._packages: dict[Path, tuple[str, object]] = {}
        self._lock = threading.Lock()

    def slots(self) -> int:
        """How many sandboxes the cluster runs at once (one per worker thread)."""
        return max(1, sum(self.client.nthreads().values()))

    def _package(self, pkg_dir: Path):
        with self._lock:
            if pkg_dir not in self._packages:
                blob = pack(pkg_dir)
                digest = hashlib.sha256(blob).hexdigest()
                self._packages[pkg_dir] = (digest, self.client.scatter(blob, broadcast=True, hash=False))
            return self._packages[pkg_dir]

    def run(self, *, job: dict, job_dir: Path, pkg_dir: Path, user, limits, venv, zygote, data=()):
        """Same arguments and result as ``supervisor.run_in_sandbox``; ``user``, ``venv`` and
        ``zygote`` are the worker's own and ignored here."""
        digest, blob = self._package(pkg_dir)
        payload = {"job": job, "inputs": pack(job_dir / "inputs"), "files": pack(job_dir / "files"),
                   "pkg_digest": digest, "pkg": blob, "limits": limits, "data": list(data)}
        return self.client.submit(run_job, payload, pure=False).result()

    def close(self) -> None:
        self.client.close()
