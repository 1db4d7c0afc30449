"""The sandbox users of one grading run: taken, created when missing, emptied of processes.

A run takes its unprivileged users (one per worker) by holding an exclusive lock on
/run/tc-grader/slot-<N>.lock for as long as it lives (see :class:`SandboxUsers`); no two live
runs share a uid, so killing every process of a sandbox uid concerns this run only. Part of
the sandbox (supervisor.py runs the jobs, exports.py reads what they wrote).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import signal
import stat as _stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

USER_PREFIX = "tcsandbox"    # not the tcgrader<N> of graders before run-owned users: those kill by uid


LOCK_DIR = Path("/run/tc-grader")     # root-only: one lock file per sandbox user
MAX_SLOTS = 512


@dataclass
class SandboxUsers:
    """Unprivileged users that belong to THIS grading run alone, for as long as it holds them.

    Slot n is the system user ``tcsandbox<n>`` (created with useradd when missing). A run takes
    a slot by holding an exclusive lock on /run/tc-grader/slot-<n>.lock; other runs on the host
    (another course, another instructor, a --student regrade) skip locked slots, so no two runs
    share a uid: killing "every process of the sandbox uid" and the per-uid process limit then
    concern this run only. The kernel drops the locks when the run ends, however it ends.
    """

    users: list[tuple[str, int, int]]
    fds: list[int]

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _lock_dir() -> Path:
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = LOCK_DIR.lstat()
    if not _stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise RuntimeError(f"{LOCK_DIR} must be a directory owned by root, not writable by others")
    return LOCK_DIR


def _ensure_user(name: str) -> tuple[str, int, int]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        with open(_lock_dir() / "useradd.lock", "w") as lock:        # one useradd at a time on the host
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                                "--comment", "course autograder sandbox", name],
                               check=True, capture_output=True)
                entry = pwd.getpwnam(name)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise RuntimeError(f"sandbox user {name} has uid or gid 0")
    return name, entry.pw_uid, entry.pw_gid


def allocate_users(count: int) -> SandboxUsers:
    """``count`` sandbox users that no other grading run on this host uses while this run lives."""
    folder = _lock_dir()
    users, fds = [], []
    for slot in range(MAX_SLOTS):
        if len(users) == count:
            break
        fd = os.open(folder / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            user = _ensure_user(f"{USER_PREFIX}{slot}")
            kill_user_processes(user[1])       # leftovers of a run that died: the slot is ours now
        except BaseException:
            os.close(fd)
            raise
        users.append(user)
        fds.append(fd)
    if len(users) < count:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"no free sandbox slot: {MAX_SLOTS} grading runs at once on this host?")
    return SandboxUsers(users, fds)


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def kill_user_processes(uid: int, wait: float = 5.0) -> int:
    """SIGKILL every process running as the sandbox uid; return how many were found."""
    deadline = time.monotonic() + wait
    found = 0
    while True:
        pids = processes_of(uid)
        if not pids:
            return found
        found = max(found, len(pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of sandbox uid {uid} survive SIGKILL: {pids}")
        time.sleep(0.02)
