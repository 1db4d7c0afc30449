"""The sandbox a submission runs in, and the supervisor that watches it.

Built from what a plain Linux machine has (no Docker engine): Linux namespaces,
bind mounts, resource limits and an unprivileged user, set up by root. One
"zygote" per worker (zygote.py: a clean process with NumPy, Matplotlib and
IPython imported, and nothing of the course) forks for every submission a
process that, before any student code runs:

* enters new mount, network, PID, IPC and UTS namespaces; the network namespace
  has only a loopback interface that is down: no network at all, 127.0.0.1 included;
* builds a new root file system and pivots into it: a small read-only tmpfs with
  /usr, /etc, the Python installation and the course's virtual environment
  bind-mounted read-only (nosuid, nodev), /dev with null/zero/full/random/urandom
  only, a fresh /proc (this PID namespace's processes only), /grading (the runner,
  the job, the hidden cases' inputs; read-only), /pkg (the course package with this
  notebook's reference functions stubbed out; read-only), and /submission, /exports
  and /tmp from a per-job size-limited tmpfs. The repository, the gradebook,
  submitted/, grades/, other students' jobs and the grader's own files are not in
  this file system at all. The virtual environment's site-packages shows only what the
  course's rule allows (transformer_course/exercise_rule.py: NumPy, matplotlib, the
  runner's IPython, what they require, the notebook's model data; :func:`sandbox_site`),
  and every other Python package folder of the machine is an empty read-only tmpfs;
* sets resource limits (address space, processes, CPU seconds, file size, open
  files, no core dumps), drops the capability bounding set, switches to the
  worker's unprivileged sandbox user (owned by this run alone, see sandbox_users.SandboxUsers)
  with no supplementary groups, sets no_new_privs, installs the seccomp filter
  (seccomp.py), and replaces the environment (HOME in /tmp; none of the
  instructor's variables);
* then runs the cells (grader/sandboxed/runner.py) as PID 1 of its PID namespace: when it ends, or
  is killed, every process the submission started dies with it.

The supervisor (this module, trusted, outside) reads the merged stdout/stderr
through a pipe with caps per cell, per line and in total, times every chunk
(a soft limit enforced by the runner with SIGALRM, then a hard kill), kills the
whole sandbox on a timeout or when the output exceeds the hard cap, and only
once no process of the sandbox user is left reads what the run exported --
regular files only, without following links, size-bounded.

The sandbox's three jobs are three modules: this one (the limits, the mounts, the zygote and the
supervisor of one run), sandbox_users.py (the run's sandbox users) and exports.py (reading the exports).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from .exports import read_exports
from .sandbox_users import kill_user_processes

HERE = Path(__file__).resolve().parent


@dataclass
class Limits:
    cell_timeout: float = 30.0        # soft: the cell is interrupted and the next one runs
    grace: float = 3.0                # hard: no sign of life this long after the soft limit -> kill
    startup_timeout: float = 60.0     # the runner must be ready within this
    notebook_timeout: float = 600.0   # the whole run
    memory_bytes: int = 2 << 30       # RLIMIT_AS
    processes: int = 32               # RLIMIT_NPROC (threads count too), per sandbox user
    cpu_seconds: int = 600            # RLIMIT_CPU
    file_bytes: int = 64 << 20        # RLIMIT_FSIZE
    open_files: int = 256             # RLIMIT_NOFILE
    scratch_bytes: int = 512 << 20    # tmpfs for /work, /exports and /tmp together
    cell_output_bytes: int = 20_000   # kept per cell for the feedback
    line_chars: int = 1_000           # each kept line is cut to this
    total_output_bytes: int = 200_000  # kept per notebook
    hard_output_bytes: int = 64 << 20  # read from the pipe before the run is killed

    def scaled_cpu(self) -> int:
        return int(max(self.cpu_seconds, 10))


# --------------------------------------------------------------------------- mounts
def private_mount_namespace() -> bool:
    """Move the grader into its own mount namespace, so that its per-job mounts vanish with it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS = 0x00020000
    MS_REC, MS_PRIVATE = 0x4000, 1 << 18
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return True


def mount_tmpfs(path: Path, size: int, mode: str = "0755") -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode},nosuid,nodev",
                    "grader-scratch", str(path)], check=True, capture_output=True)


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def sandbox_problem() -> str | None:
    """Why the sandbox cannot be built on this machine (None when it can)."""
    if os.geteuid() != 0:
        return ("the grader must run as root: it creates unprivileged sandbox users and "
                "private namespaces (mount, network, PID) for every submission")
    from . import seccomp

    if not seccomp.supported():
        return f"the sandbox's seccomp filter is defined for {', '.join(seccomp.ARCHES)} only, not {os.uname().machine}"
    for tool in ("unshare", "mount", "umount", "useradd"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux / passwd) is not installed"
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        return "unshare --mount --net --pid failed: " + probe.stderr.decode(errors="replace").strip()
    return None


# --------------------------------------------------------------------------- running one job
@dataclass
class CellRun:
    index: int
    output: list[str] = field(default_factory=list)   # kept lines (visible chunks only)
    kept_bytes: int = 0
    dropped_bytes: int = 0
    started: bool = False
    ended: bool = False
    chunks: list[dict] = field(default_factory=list)  # the runner's per-chunk results


@dataclass
class Execution:
    status: str                       # ok | timeout | crashed | output-limit | sandbox-error | startup-timeout
    exit_code: int | None
    seconds: float
    cells: dict[int, CellRun]
    last_cell: int | None             # the cell running when the run ended abnormally
    detail: str = ""
    preamble: str = ""                # output before the runner was ready (sandbox set-up problems)
    dropped_bytes: int = 0
    total_bytes: int = 0


class _Reader:
    """Split the pipe into cells at the runner's control lines; keep bounded output per cell.

    Markers are found with a byte search, so huge output (a 50 MB line, millions of
    lines) costs a scan, not a Python loop per line, once a cell's share is full.
    """

    def __init__(self, nonce: str, limits: Limits):
        self.prefix = f"\x1e{nonce} ".encode()
        self.limits = limits
        self.pending = b""
        self.line = bytearray()
        self.line_dropped = 0
        self.cells: dict[int, CellRun] = {}
        self.current: CellRun | None = None
        self.hidden = False
        self.preamble = bytearray()
        self.events: list[tuple[str, dict]] = []
        self.total = 0
        self.kept_total = 0
        self.dropped = 0

    # -- bytes in
    def feed(self, data: bytes) -> None:
        self.total += len(data)
        buf = self.pending + data if self.pending else data
        pos = 0
        keep = len(self.prefix) - 1
        while True:
            i = buf.find(self.prefix, pos)
            if i < 0:
                safe = max(pos, len(buf) - keep)
                self._text(buf[pos:safe])
                self.pending = bytes(buf[safe:])
                return
            self._text(buf[pos:i])
            j = buf.find(b"\n", i)
            if j < 0:
                if len(buf) - i > 65536:                 # not a real control line: text
                    self._text(buf[i:])
                    self.pending = b""
                else:
                    self.pending = bytes(buf[i:])
                return
            self._control(buf[i + len(self.prefix):j])
            pos = j + 1

    def finish(self) -> None:
        if self.pending:
            self._text(self.pending)
            self.pending = b""
        self._end_line()

    # -- text
    def _full(self) -> bool:
        cell = self.current
        return (cell.kept_bytes >= self.limits.cell_output_bytes
                or self.kept_total >= self.limits.total_output_bytes)

    def _drop(self, n: int) -> None:
        self.dropped += n
        if self.current is not None:
            self.current.dropped_bytes += n

    def _text(self, data: bytes) -> None:
        if not data:
            return
        if self.current is None:
            if len(self.preamble) < 20_000:
                self.preamble += data[:2000]
            return
        if self.hidden:                          # the hidden tests' own output is never shown
            return
        start, n = 0, len(data)
        while start < n:
            if self._full():
                self._drop(n - start + len(self.line))
                self.line = bytearray()
                self.line_dropped = 0
                return
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            room = self.limits.line_chars * 4 - len(self.line)
            if room > 0:
                self.line += data[start:min(end, start + room)]
            self.line_dropped += max(0, (end - start) - max(room, 0))
            if nl < 0:
                return
            self._end_line(force=True)
            start = nl + 1

    def _end_line(self, force: bool = False) -> None:
        if not force and not self.line and not self.line_dropped:
            return
        raw, lost = bytes(self.line), self.line_dropped
        self.line = bytearray()
        self.line_dropped = 0
        if self.current is None or self.hidden:
            return
        text = raw.decode("utf-8", errors="replace")
        if len(text) > self.limits.line_chars or lost:
            text = text[: self.limits.line_chars] + f" [... line cut: {len(raw) + lost:,} bytes in total]"
        size = len(text) + 1
        cell = self.current
        if cell.kept_bytes + size > self.limits.cell_output_bytes or \
                self.kept_total + size > self.limits.total_output_bytes:
            self._drop(len(raw) + lost + 1)
            cell.kept_bytes = self.limits.cell_output_bytes
            return
        cell.output.append(text)
        cell.kept_bytes += size
        self.kept_total += size

    # -- control lines
    def _control(self, raw: bytes) -> None:
        try:
            event, _, payload = raw.decode().partition(" ")
            payload = json.loads(payload) if payload else {}
        except (ValueError, UnicodeDecodeError):
            self._text(self.prefix + raw + b"\n")
            return
        self._end_line()
        self.events.append((event, payload))
        if event == "start":
            index = int(payload["cell"])
            self.current = self.cells.setdefault(index, CellRun(index))
            self.current.started = True
            self.hidden = False
        elif event == "chunk":
            self.hidden = bool(payload.get("hidden"))
        elif event == "result" and self.current is not None:
            self.current.chunks.append(payload)
            self.hidden = False
        elif event == "end" and self.current is not None:
            self.current.ended = True
            self.hidden = False


# --------------------------------------------------------------------------- what an exercise may import
FOREIGN_PACKAGE_DIRS = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                        "local/lib/python3*/site-packages", "local/lib/python3*/dist-packages",
                        "lib64/python3*/site-packages")


@functools.lru_cache(maxsize=None)
def sandbox_site(venv: Path, data: tuple[str, ...] = ()) -> dict:
    """The sandbox's Python packages, by the course's rule (transformer_course/exercise_rule.py):

    * ``site`` (the environment's site-packages) shows ``expose``, the files of the allowed distributions --
      the rule's libraries and runner with what they require, read from their metadata, and the notebook's
      data distributions ``data`` -- in ``folders`` where a folder is shared with other distributions;
    * ``hide``: every other Python package folder the sandbox's /usr and base Python hold, made empty;
    * ``blocked``: the top-level names of what is left out, for the rule's message on import
      (``message``, with ``{name}`` for the name). Computed once per environment and data set."""
    from transformer_course import exercise_rule

    venv = Path(venv)
    site_dir = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    allowed = exercise_rule.allowed_distributions(data, path=[str(site_dir)])
    expose, folders = exercise_rule.site_view(site_dir, allowed)
    shown = set(expose)
    hide, names = [], set()
    for entry in os.listdir(site_dir):
        if entry not in shown and entry not in folders:
            names.add(entry)
    bases = {Path("/usr"), Path(sys.base_prefix)}
    for base in bases:
        for pattern in FOREIGN_PACKAGE_DIRS:
            for folder in sorted(base.glob(pattern)):
                if folder.is_dir() and not folder.is_symlink() and folder.resolve() != site_dir.resolve():
                    hide.append(str(folder))
                    names.update(os.listdir(folder))
    top = lambda n: n.split(".")[0]                     # noqa: E731 -- scipy, six.py, _yaml.cpython-311-...so
    kept = {top(n) for n in shown}
    blocked = sorted({top(n) for n in names if not n.endswith((".dist-info", ".egg-info", ".pth"))
                      and top(n).isidentifier() and top(n) not in kept and n != "__pycache__"})
    return {"site": str(site_dir), "expose": expose, "folders": folders, "hide": sorted(set(hide)),
            "blocked": blocked, "message": exercise_rule.library_message("{name}")}


def sandbox_env(venv: Path) -> dict:
    """The student's whole environment: nothing of the instructor's."""
    return {
        "HOME": "/tmp/home", "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
        "PATH": f"{venv}/bin:/usr/bin:/bin", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/mpl",
        "IPYTHONDIR": "/tmp/ipython", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": "/pkg",
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "COURSE_GRADING_EXPORT": "/exports", "COURSE_GRADING_INPUTS": "/grading/inputs",
        # what nbgrader's autograde sets: the notebooks skip their long demonstrations (10's training,
        # 09's and 11's model runs) while they are graded, as they do under Validate
        "NBGRADER_EXECUTION": "autograde",
    }


class Zygote:
    """One warm process per worker that forks a fresh sandbox per job (see zygote.py)."""

    def __init__(self, run_dir: Path, slot: int, font_cache: Path | None = None, timeout: float = 180.0):
        self.dir = Path(run_dir) / f"zygote-{slot}"
        for sub in ("home", "mpl", "ipython"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        if font_cache is not None and font_cache.exists():
            shutil.copyfile(font_cache, self.dir / "mpl" / font_cache.name)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": str(self.dir / "home"),
               "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(self.dir / "mpl"), "IPYTHONDIR": str(self.dir / "ipython"),
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.log = open(self.dir / "zygote.log", "wb")
        # -I: no user site, no PYTHONPATH; -S: no site.py, so no .pth file of the environment runs in the zygote
        # (setuptools' distutils shim, the editable install's finder): it imports only what the rule allows
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(HERE / "zygote.py"), str(theirs.fileno()),
                                      sys.prefix, sysconfig.get_paths()["purelib"]],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        theirs.close()
        self.ready = False
        self.timeout = timeout

    def wait_ready(self) -> None:
        if self.ready:
            return
        self.sock.settimeout(self.timeout)
        try:
            msg = self.sock.recv(4096)
        except socket.timeout:
            msg = b""
        self.sock.settimeout(None)
        if not msg or "ready" not in json.loads(msg):
            self.close()
            log = (self.dir / "zygote.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the sandbox zygote did not start: {log}")
        self.ready = True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_in_sandbox(*, job: dict, job_dir: Path, pkg_dir: Path, user: tuple[str, int, int],
                   limits: Limits, venv: Path, zygote: Zygote,
                   data: tuple[str, ...] = ()) -> tuple[Execution, dict[str, bytes], dict[str, str]]:
    """Run one rebuilt notebook in a fresh sandbox; return what happened and the exported files.

    ``job`` is the runner's job description (cells and chunks). ``job_dir`` is a fresh,
    root-only folder. ``data``: the notebook's data distributions (exercise_rule.data_for), shown
    in its site-packages beside the allowed libraries. The exported files are returned as bytes,
    read after the sandbox is dead, without following links, and bounded in size.
    """
    name, uid, gid = user
    kill_user_processes(uid)
    zygote.wait_ready()
    nonce = secrets.token_hex(8)
    site = sandbox_site(Path(venv), tuple(sorted(data)))
    job = dict(job, nonce=nonce, cell_timeout=limits.cell_timeout, pid_namespace=True,
               sys_path=["/submission", "/pkg"], timing=bool(os.environ.get("GRADER_TIMING")),
               not_available={"names": site["blocked"], "message": site["message"]})

    grading = job_dir / "grading"
    grading.mkdir(parents=True)
    shutil.copyfile(HERE.parent / "sandboxed" / "runner.py", grading / "runner.py")
    (grading / "job.json").write_text(json.dumps(job), encoding="utf-8")
    if (job_dir / "inputs").exists():
        shutil.move(str(job_dir / "inputs"), grading / "inputs")
    for path in [grading, *grading.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (job_dir / "root").mkdir()
    rw = job_dir / "rw"
    rw.mkdir()
    mount_tmpfs(rw, limits.scratch_bytes, "0755")
    try:
        for sub in ("work", "exports", "tmp", "tmp/home", "tmp/mpl", "tmp/ipython"):
            (rw / sub).mkdir()
            os.chown(rw / sub, uid, gid)
            (rw / sub).chmod(0o700)
        (rw / "tmp").chmod(0o1777)
        for src in (job_dir / "files").glob("*") if (job_dir / "files").exists() else []:
            shutil.copyfile(src, rw / "work" / src.name)
            os.chown(rw / "work" / src.name, uid, gid)
        request = {
            "setup_env": {"SB_ROOT": str(job_dir / "root"), "SB_RW": str(rw), "SB_GRADING": str(grading),
                          "SB_PKG": str(pkg_dir), "SB_VENV": str(venv), "SB_PYBASE": sys.base_prefix,
                          "SB_SITE": {k: site[k] for k in ("site", "expose", "folders", "hide")}},
            "limits": {"memory_bytes": limits.memory_bytes, "processes": limits.processes,
                       "cpu_seconds": limits.scaled_cpu(), "file_bytes": limits.file_bytes,
                       "open_files": limits.open_files},
            "uid": uid, "gid": gid, "env": sandbox_env(venv), "timing": bool(os.environ.get("GRADER_TIMING")),
        }
        execution = _supervise(zygote, request, nonce, limits, uid)
        files, refused = read_exports(rw / "exports", uid)
    finally:
        kill_user_processes(uid)
        umount(rw)
    return execution, files, refused


def _supervise(zygote: Zygote, request: dict, nonce: str, limits: Limits, uid: int) -> Execution:
    started = time.monotonic()
    r, w = os.pipe()
    try:
        socket.send_fds(zygote.sock, [json.dumps(request).encode()], [w])
    finally:
        os.close(w)
    os.set_blocking(r, False)
    sock = zygote.sock
    reader = _Reader(nonce, limits)
    pids: dict[str, int] = {}
    status, detail = "ok", ""
    ready = False
    soft_deadline = None
    n_events = 0
    eof = False
    marks: dict[str, float] = {}

    def take_message():
        msg = sock.recv(4096)
        if not msg:
            raise RuntimeError("the sandbox zygote died")
        pids.update(json.loads(msg))

    try:
        while not eof or "exit" not in pids:
            now = time.monotonic()
            if not ready:
                deadline = started + limits.startup_timeout
            else:
                deadline = soft_deadline + limits.grace if soft_deadline is not None else now + 3600
            deadline = min(deadline, started + limits.notebook_timeout)
            if eof:                                   # output closed: only the exit status is missing
                deadline = min(deadline, now + 10)
            if now >= deadline:
                if eof:
                    status, detail = "crashed", "the sandbox did not report its exit"
                elif not ready:
                    status, detail = "startup-timeout", f"the sandbox did not start within {limits.startup_timeout:g} s"
                elif now >= started + limits.notebook_timeout:
                    status, detail = "timeout", f"the notebook ran longer than {limits.notebook_timeout:g} s"
                else:
                    status = "timeout"
                    detail = (f"a cell ran past the {limits.cell_timeout:g} s limit and did not stop when "
                              f"interrupted: the sandbox was killed")
                break
            watch = [sock] + ([] if eof else [r])
            readable, _, _ = select.select(watch, [], [], max(0.0, min(deadline - now, 0.5)))
            if sock in readable:
                take_message()
                if "exit" in pids:
                    marks.setdefault("exit", time.monotonic() - started)
            if r in readable:
                try:
                    data = os.read(r, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    eof = True
                    marks["eof"] = time.monotonic() - started
                    continue
                reader.feed(data)
                if reader.total > limits.hard_output_bytes:
                    status = "output-limit"
                    detail = (f"the notebook printed more than {limits.hard_output_bytes / 2**20:.0f} MB: "
                              f"the sandbox was killed")
                    break
                if len(reader.events) != n_events:
                    for event, _payload in reader.events[n_events:]:
                        if event in ("ready", "done"):
                            marks[event] = time.monotonic() - started
                        if event == "ready":
                            ready = True
                        if event in ("start", "chunk"):
                            soft_deadline = time.monotonic() + limits.cell_timeout
                        elif event in ("result", "end", "done"):
                            soft_deadline = None
                    n_events = len(reader.events)
    finally:
        if "exit" not in pids:
            for key in ("grandchild", "child"):
                if key in pids:
                    try:
                        os.kill(pids[key], signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            kill_user_processes(uid)
            end = time.monotonic() + 15
            sock.settimeout(1.0)
            while "exit" not in pids and time.monotonic() < end:
                try:
                    take_message()
                except socket.timeout:
                    kill_user_processes(uid)
            sock.settimeout(None)
        os.close(r)
        reader.finish()
    if "exit" not in pids:
        raise RuntimeError("the sandbox did not report its exit status; its zygote is replaced")
    kill_user_processes(uid)
    marks["cleaned"] = time.monotonic() - started
    if os.environ.get("GRADER_TIMING"):
        print("timing:", {k: round(v, 3) for k, v in marks.items()}, reader.preamble.strip(), file=sys.stderr)
    code = pids.get("exit")
    done = any(e == "done" for e, _ in reader.events)
    if status == "ok" and not ready:
        status, detail = "sandbox-error", f"the sandbox did not start (exit code {code})"
    elif status == "ok" and not done:
        status = "crashed"
        if code is not None and code > 128:
            sig = code - 128
            try:
                signame = signal.Signals(sig).name
            except ValueError:
                signame = f"signal {sig}"
            detail = f"the Python process was killed by {signame}"
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and time.monotonic() - started > limits.cpu_seconds):
                detail += " (CPU time limit)"
        else:
            detail = f"the Python process exited early (exit code {code})"
    running = [c.index for c in reader.cells.values() if c.started and not c.ended]
    return Execution(status, code, time.monotonic() - started, reader.cells, running[-1] if running else None,
                     detail, reader.preamble.decode("utf-8", errors="replace"), reader.dropped, reader.total)


def font_cache_file() -> Path | None:
    """Matplotlib's font cache, copied into each sandbox so a figure does not rebuild it."""
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return None
    path = Path(matplotlib.get_cachedir()) / f"fontlist-v{font_manager.FontManager.__version__}.json"
    return path if path.exists() else None
