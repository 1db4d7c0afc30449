"""A warm, clean process that forks one sandbox per submission (a "zygote").

Importing NumPy, Matplotlib and IPython costs more than running a whole
notebook. The grader therefore starts one zygote per worker: a root process
with a scrubbed environment that imports those libraries -- and nothing of
the course: never ``transformer_course`` (which holds the references), no
seed, no inputs, no results -- and then waits for jobs on a socket. For each
job it forks:

    zygote (root, trusted, never runs student code)
      C  (root) unshare(mount, network, IPC, UTS, PID namespaces); fork G; wait; exit with G's status
        G  (PID 1 of the new PID namespace)
           runs the set-up script: a new root file system (see sandbox.SETUP_SCRIPT), pivot_root
           resource limits; drops the capability bounding set; setgroups([]); setresgid/setresuid to the
           run's own sandbox user; no_new_privs; the seccomp filter (seccomp.py); parent-death signal;
           closes every other descriptor;
           a fresh environment; then the cell runner -- and the student's code.

So a submission starts in the same sandbox as with a fresh interpreter
(same namespaces, file system, user and limits), only faster. Student code
never runs in the zygote or in C, so it cannot reach the zygote's socket or
any later submission; everything it can touch dies with its PID namespace.

Protocol (SOCK_SEQPACKET, JSON messages): the grader sends a job with the write
end of the output pipe attached; the zygote answers {"child": pid}, C sends
{"grandchild": host pid of G}, and after C exits the zygote sends {"exit": code}
(128 + N when G died of signal N).
"""

import ctypes
import io
import json
import os
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER_DIR = os.path.join(os.path.dirname(HERE), "sandboxed")   # grader/sandboxed/runner.py

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWNET, CLONE_NEWPID = 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38

libc = ctypes.CDLL(None, use_errno=True)
seccomp = None       # grader/trusted/seccomp.py, imported in main()


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def preload():
    """Import what every notebook imports, once (nothing of the course, and nothing the course's rule leaves out
    of the sandbox: a forked child keeps the zygote's modules, so SciPy -- which the package's GELU once needed --
    is not imported here. transformer_course/exercise_rule.py; tests/test_grader_libraries.py checks)."""
    import numpy  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import concurrent.futures  # noqa: F401
    from IPython.core import interactiveshell, ultratb  # noqa: F401
    try:
        import stack_data  # noqa: F401  (IPython's tracebacks)
        import pygments.lexers.python  # noqa: F401
    except ImportError:
        pass
    from traitlets.config import Config  # noqa: F401
    import runner  # noqa: F401  (grader/sandboxed/runner.py: the same file the sandbox shows)


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}


def _b(value):
    return None if value is None else os.fsencode(value)


def _mount(source, target, fstype, flags, data=None):
    _check(libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")


def build_root(env):
    """The sandbox's file system, then pivot_root into it (G is root in its own mount namespace).

    A 4 MB read-only tmpfs as /, holding: /usr, /etc and the Python installation and the
    course's virtual environment bind-mounted read-only (nosuid, nodev); /dev with null, zero,
    full, random, urandom and a 16 MB /dev/shm; this PID namespace's /proc; /grading (runner,
    job, inputs) and /pkg (the package copy) read-only; /submission, /exports and /tmp from the
    job's size-limited tmpfs. Nothing else of the machine -- the repository, the gradebook,
    submitted/, grades/, other jobs -- exists in it.
    """
    R = env["SB_ROOT"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("sandbox-root", R, "tmpfs", MS_NOSUID, "size=4m,mode=0755")

    def place(target, is_dir):
        path = R + target
        if is_dir:
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        return path

    def bind(source, target, readonly=True, flags=MS_NOSUID | MS_NODEV):
        path = place(target, os.path.isdir(source))
        _mount(source, path, None, MS_BIND)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | flags | (MS_RDONLY if readonly else 0))

    os.makedirs(R + "/dev")
    _mount("sandbox-dev", R + "/dev", "tmpfs", MS_NOSUID, "size=64k,mode=0755")
    for name in ("null", "zero", "full", "random", "urandom"):
        path = place("/dev/" + name, False)
        _mount("/dev/" + name, path, None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, R + "/dev/" + name)
    os.makedirs(R + "/dev/shm")
    _mount("sandbox-shm", R + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    os.makedirs(R + "/proc")
    _mount("proc", R + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    bind(env["SB_RW"] + "/work", "/submission", readonly=False)
    bind(env["SB_RW"] + "/exports", "/exports", readonly=False)
    bind(env["SB_RW"] + "/tmp", "/tmp", readonly=False)
    bind(env["SB_GRADING"], "/grading")
    bind(env["SB_PKG"], "/pkg")
    for top in ("/usr", "/etc"):
        bind(top, top)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), R + top)
        elif os.path.isdir(top):
            bind(top, top)
    for tree in (env["SB_PYBASE"], env["SB_VENV"]):
        if not tree.startswith("/usr/") and not os.path.exists(R + tree + "/bin"):
            bind(tree, tree)
    if env.get("SB_SITE"):
        python_packages(R, env["SB_SITE"])
    os.makedirs(R + "/.old")
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown system call number on {os.uname().machine}")
    _check(libc.syscall(number, _b(R), _b(R + "/.old")), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def python_packages(R, site):
    """The course's rule on the sandbox's file system (transformer_course/exercise_rule.py; the lists are made by
    supervisor.sandbox_site): the environment's site-packages becomes a read-only tmpfs showing only the allowed
    distributions' files, each bound from the read-only environment (a bind inherits its source's read-only
    flag); every other Python package folder of /usr and the base Python is covered by an empty one."""
    target = R + site["site"]
    stage = R + "/.site"
    os.makedirs(stage)
    _mount("sandbox-site", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for folder in site["folders"]:
        os.makedirs(stage + "/" + folder, exist_ok=True)
    for rel in site["expose"]:
        src, dst = target + "/" + rel, stage + "/" + rel
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
            continue
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            open(dst, "a").close()
        _mount(src, dst, None, MS_BIND)
    _mount(None, stage, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(stage, target, None, MS_MOVE)
    os.rmdir(stage)
    for folder in site["hide"]:
        if os.path.isdir(R + folder):
            _mount("sandbox-hidden", R + folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "size=4k,mode=0755")


def grandchild(job, out_fd, sock):
    """G: build the sandbox around itself, become the student, run the cells. Never returns."""
    try:
        sock.close()
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        for fd in (devnull, out_fd):
            if fd > 2:
                os.close(fd)
        import time
        t0 = time.monotonic()
        build_root(job["setup_env"])
        if job.get("timing"):
            os.write(1, f"timing: new root {time.monotonic() - t0:.3f} s\n".encode())

        import resource

        lim = job["limits"]
        for res, value in ((resource.RLIMIT_AS, lim["memory_bytes"]), (resource.RLIMIT_NPROC, lim["processes"]),
                           (resource.RLIMIT_CPU, lim["cpu_seconds"]), (resource.RLIMIT_FSIZE, lim["file_bytes"]),
                           (resource.RLIMIT_NOFILE, lim["open_files"]), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (value, value))
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        uid, gid = job["uid"], job["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("could not drop root")
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        seccomp.install()              # keyrings, ptrace, namespaces, mounts, ... denied (seccomp.py)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        os.closerange(3, 1 << 16)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        os.environ.clear()
        os.environ.update(job["env"])
        sys.path[:] = [p for p in sys.path if p and os.path.isdir(p) and p not in (HERE, RUNNER_DIR)]
        sys.path_importer_cache.clear()
        import importlib

        importlib.invalidate_caches()
        import matplotlib

        for fn in (matplotlib.get_cachedir, matplotlib.get_configdir):
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                                      line_buffering=False)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                      line_buffering=False)
        sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.argv = ["runner", "/grading/job.json"]
        import runner

        runner.main("/grading/job.json")
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 -- report set-up failures on the pipe, then die
        try:
            os.write(2, f"sandbox set-up failed: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(121)


def child(job, out_fd, sock):
    """C: new namespaces, fork G (PID 1 inside), wait, exit with G's status. Never returns."""
    try:
        _check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID), "unshare")
        pid = os.fork()
        if pid == 0:
            grandchild(job, out_fd, sock)
        # If the zygote dies (the grader was killed), C gets SIGTERM and takes G -- and with it the
        # whole PID namespace -- along, even if the student's code cleared G's own parent-death signal.
        signal.signal(signal.SIGTERM, lambda *_: (os.kill(pid, signal.SIGKILL), os._exit(1)))
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() == 1:
            os.kill(pid, signal.SIGKILL)
        os.close(out_fd)
        sock.send(json.dumps({"grandchild": pid}).encode())
        sock.close()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else min(code, 255))
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(out_fd, f"sandbox set-up failed: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(122)


def serve(sock):
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            return
        if not msg:
            return
        job = json.loads(msg)
        if not fds:
            sock.send(json.dumps({"error": "no output descriptor"}).encode())
            continue
        out_fd = fds[0]
        for extra in fds[1:]:
            os.close(extra)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(job, out_fd, sock)
        os.close(out_fd)
        sock.send(json.dumps({"child": pid}).encode())
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sock.send(json.dumps({"exit": 128 - code if code < 0 else code}).encode())


def main():
    global seccomp
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)     # the grader died: so does the zygote
    # Started with -S (no site.py, so no .pth file runs): what site.py's venv() would set, by hand -- the
    # environment's prefix and its site-packages, which the sandbox shows as the rule's view of it.
    sys.prefix = sys.exec_prefix = sys.argv[2]
    sys.path.append(sys.argv[3])
    sys.path.insert(0, HERE)
    import seccomp  # noqa: F401  (grader/trusted/seccomp.py)
    sys.path.remove(HERE)
    sys.path.insert(0, RUNNER_DIR)
    fd = int(sys.argv[1])
    sock = socket.socket(fileno=fd)
    preload()
    import gc

    gc.collect()
    gc.freeze()          # the preloaded objects: never scanned (nor copied) by the children's collector
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    serve(sock)


if __name__ == "__main__":
    main()
