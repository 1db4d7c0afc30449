"""Limits per hub user: memory, processes, CPU share (hub/README.md, "Limits per student").

Only the standard library: the hub's spawner (jupyterhub_config.py), hubctl.py and the tests
import it. What the host allows decides how:

* ``cgroup2``: a unified hierarchy with the memory, pids and cpu controllers (a systemd host
  with ``Delegate=yes`` in hub/tc-hub.service): ``<hub's cgroup>/tc-hub/<user>`` with
  ``memory.max``, ``memory.swap.max = 0``, ``pids.max``, ``cpu.weight``;
* ``cgroup1``: the legacy hierarchies (this course's build machine: memory, pids and cpu are
  mounted under /sys/fs/cgroup/<controller>): ``<hub's cgroup>/tc-hub/<user>`` in each, with
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted),
  ``pids.max``, ``cpu.shares``;
* ``rlimit`` (no writable cgroups): ``RLIMIT_AS`` per process and ``RLIMIT_NPROC`` per uid,
  and ``nice`` for the CPU; weaker (a student can run several processes of the full size).

A user's server process enters its cgroup before it drops root (the spawner's preexec), so
every kernel, terminal and Validate run it starts is inside and counted.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")
GROUP = "tc-hub"


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 3072       # per student, all their processes together
    processes: int = 512        # tasks (processes and threads) per student
    cpu_share: int = 100        # relative weight; 100 = an equal share of the machine when contended

    @classmethod
    def from_env(cls, env=os.environ) -> "Limits":
        return cls(memory_mb=int(env.get("TC_HUB_MEMORY_MB", cls.memory_mb)),
                   processes=int(env.get("TC_HUB_PROCESSES", cls.processes)),
                   cpu_share=int(env.get("TC_HUB_CPU_SHARE", cls.cpu_share)))


def _own_cgroup(controller: str | None) -> str:
    """This process's cgroup path in a v1 controller's hierarchy (None: the v2 one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller and controller in names.split(",")):
            return path.lstrip("/")
    return ""


def mode() -> str:
    """'cgroup2', 'cgroup1' or 'rlimit': what this host lets the hub (root) use."""
    if os.geteuid() == 0:
        controllers = CGROUP / "cgroup.controllers"
        if controllers.exists() and {"memory", "pids", "cpu"} <= set(controllers.read_text().split()):
            if os.access(CGROUP / _own_cgroup(None), os.W_OK):
                return "cgroup2"
        if all((CGROUP / c / "cgroup.procs").exists() and os.access(CGROUP / c / _own_cgroup(c), os.W_OK)
               for c in V1_CONTROLLERS):
            return "cgroup1"
    return "rlimit"


def cgroup_dirs(user: str, how: str | None = None) -> dict[str, Path]:
    how = how or mode()
    if how == "cgroup2":
        return {"unified": CGROUP / _own_cgroup(None) / GROUP / user}
    if how == "cgroup1":
        return {c: CGROUP / c / _own_cgroup(c) / GROUP / user for c in V1_CONTROLLERS}
    return {}


def _write(path: Path, value) -> None:
    path.write_text(f"{value}\n")


def create(user: str, limits: Limits, how: str | None = None) -> dict[str, Path]:
    """The user's cgroup(s) with the limits set (kept if they exist); {} under rlimits."""
    how = how or mode()
    dirs = cgroup_dirs(user, how)
    mem = limits.memory_mb * 2**20
    if how == "cgroup2":
        group = dirs["unified"].parent
        group.mkdir(exist_ok=True)
        for parent in (group.parent, group):
            _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
        d = dirs["unified"]
        d.mkdir(exist_ok=True)
        _write(d / "memory.max", mem)
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", 0)
        _write(d / "pids.max", limits.processes)
        _write(d / "cpu.weight", limits.cpu_share)
    elif how == "cgroup1":
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        m = dirs["memory"]
        # memsw (memory + swap) must stay >= the memory limit: lower order depends on the old value
        memsw = m / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            _write(memsw, max(mem, int(memsw.read_text())))
        _write(m / "memory.limit_in_bytes", mem)
        if memsw.exists():
            _write(memsw, mem)
        _write(dirs["pids"] / "pids.max", limits.processes)
        _write(dirs["cpu"] / "cpu.shares", limits.cpu_share * 1024 // 100)
    return dirs


def enter(dirs: dict[str, Path], limits: Limits, pid: int | None = None) -> None:
    """Put ``pid`` (default: this process) into the cgroups; under rlimits, set this process's.

    Called in the child between fork and exec, as root, before the uid is dropped.
    """
    pid = pid or os.getpid()
    for d in dirs.values():
        _write(d / "cgroup.procs", pid)
    if not dirs:
        mem = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        os.nice(10 if limits.cpu_share < 100 else 0)


def usage(user: str, how: str | None = None) -> dict:
    """What the kernel counts for the user: memory now and at most, OOM kills, tasks, limits."""
    how = how or mode()
    dirs = cgroup_dirs(user, how)
    out: dict = {"mode": how}
    if how == "cgroup1" and dirs["memory"].exists():
        m, p = dirs["memory"], dirs["pids"]
        out.update(memory=int((m / "memory.usage_in_bytes").read_text()),
                   memory_peak=int((m / "memory.max_usage_in_bytes").read_text()),
                   memory_limit=int((m / "memory.limit_in_bytes").read_text()),
                   memory_failcnt=int((m / "memory.failcnt").read_text()),
                   pids=int((p / "pids.current").read_text()), pids_limit=(p / "pids.max").read_text().strip(),
                   cpu_shares=int((dirs["cpu"] / "cpu.shares").read_text()))
        oom = (m / "memory.oom_control").read_text().split()
        if "oom_kill" in oom:
            out["oom_kills"] = int(oom[oom.index("oom_kill") + 1])
    elif how == "cgroup2" and dirs["unified"].exists():
        d = dirs["unified"]
        events = dict(line.split() for line in (d / "memory.events").read_text().splitlines())
        out.update(memory=int((d / "memory.current").read_text()),
                   memory_limit=int((d / "memory.max").read_text()),
                   oom_kills=int(events.get("oom_kill", 0)),
                   pids=int((d / "pids.current").read_text()), pids_limit=(d / "pids.max").read_text().strip(),
                   cpu_weight=int((d / "cpu.weight").read_text()))
        if (d / "memory.peak").exists():
            out["memory_peak"] = int((d / "memory.peak").read_text())
    return out


def members(user: str, how: str | None = None) -> list[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(user, how).values():
        if (d / "cgroup.procs").exists():
            pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
    return sorted(pids)


def remove(user: str, how: str | None = None, wait: float = 5.0) -> None:
    """Remove the user's cgroups (their processes must be gone: the kernel refuses otherwise)."""
    for d in cgroup_dirs(user, how).values():
        deadline = time.monotonic() + wait
        while d.exists():
            try:
                d.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            d.parent.rmdir()            # the hub's tc-hub group, once no user is left in it
        except OSError:
            pass
