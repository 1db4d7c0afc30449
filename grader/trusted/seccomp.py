"""The sandbox's system-call filter (seccomp BPF), written out here: no library needed.

Installed in the sandboxed process after ``no_new_privs`` and before any student code
runs; inherited by every process it starts. Denied with EPERM: the kernel keyrings
(``add_key``, ``keyctl``, ``request_key``: a key would outlive the submission and be
readable by the next one with the same uid), ``ptrace`` and cross-process memory access,
new namespaces (``unshare``, ``setns``, ``clone``/``clone3`` with a CLONE_NEW* flag --
``clone3`` answers ENOSYS so that libc falls back to ``clone``, whose flags a filter can
read), mounts and the new mount API, ``chroot``/``pivot_root``, BPF, perf events,
``userfaultfd``, io_uring, handles to files by inode, kernel modules, kexec, swap,
reboot, accounting and quotas. Any other architecture than the one the filter was built
for (e.g. x32 system calls on x86_64) kills the process.

grader/README.md ("The sandbox") says why a filter of our own instead of bubblewrap's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# architecture -> (AUDIT_ARCH value, clone number, clone3 number, {name: number})
_DENY_NAMES = ("add_key", "request_key", "keyctl", "ptrace", "process_vm_readv", "process_vm_writev", "unshare",
               "setns", "mount", "umount2", "pivot_root", "chroot", "bpf", "perf_event_open", "userfaultfd",
               "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon", "swapoff",
               "reboot", "acct", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
               "name_to_handle_at", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
               "mount_setattr", "quotactl", "lookup_dcookie")
ARCHES = {
    "x86_64": (0xC000003E, 56, 435, dict(zip(_DENY_NAMES, (
        248, 249, 250, 101, 310, 311, 272, 308, 165, 166, 155, 161, 321, 298, 323, 246, 320, 175, 313, 176, 167,
        168, 169, 163, 425, 426, 427, 304, 303, 428, 429, 430, 431, 432, 433, 442, 179, 212))), 0x40000000),
    "aarch64": (0xC00000B7, 220, 435, dict(zip(_DENY_NAMES, (
        217, 218, 219, 117, 270, 271, 97, 268, 40, 39, 41, 51, 280, 241, 282, 104, 294, 105, 273, 106, 224,
        225, 142, 89, 425, 426, 427, 265, 264, 428, 429, 430, 431, 432, 433, 442, 60, 18))), None),
}
CLONE_NEW_FLAGS = 0x7E020000 | 0x80     # NEWNS NEWCGROUP NEWUTS NEWIPC NEWUSER NEWPID NEWNET | NEWTIME

# BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def supported() -> bool:
    return os.uname().machine in ARCHES


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions."""
    arch, clone_nr, clone3_nr, deny, x32_bit = ARCHES[machine or os.uname().machine]
    numbers = sorted(deny.values())
    head = [(LD_W_ABS, 0, 0, 4),                      # seccomp_data.arch
            (JEQ_K, 1, 0, arch),
            (RET_K, 0, 0, RET_KILL_PROCESS),
            (LD_W_ABS, 0, 0, 0)]                      # seccomp_data.nr
    if x32_bit is not None:
        head += [(JGE_K, 0, 1, x32_bit), (RET_K, 0, 0, RET_KILL_PROCESS)]
    # Layout after the head: one JEQ per denied number (-> DENY), clone3 (-> ENOSYS), clone (-> flag check),
    # ALLOW, [flag check: load args[0] low word, JSET -> DENY, ALLOW], DENY, ENOSYS.
    body = []
    n = len(numbers)
    # indices relative to the start of the body
    i_clone3, i_clone = n, n + 1
    i_allow = n + 2
    i_flags = n + 3            # LD args[0]
    i_deny = n + 6
    i_enosys = n + 7
    for j, nr in enumerate(numbers):
        body.append((JEQ_K, i_deny - j - 1, 0, nr))
    body.append((JEQ_K, i_enosys - i_clone3 - 1, 0, clone3_nr))
    body.append((JEQ_K, i_flags - i_clone - 1, 0, clone_nr))
    body.append((RET_K, 0, 0, RET_ALLOW))
    body.append((LD_W_ABS, 0, 0, 16))                # seccomp_data.args[0], low 32 bits (little-endian)
    body.append((JSET_K, i_deny - (i_flags + 1) - 1, 0, CLONE_NEW_FLAGS))
    body.append((RET_K, 0, 0, RET_ALLOW))
    body.append((RET_K, 0, 0, RET_ERRNO | errno.EPERM))
    body.append((RET_K, 0, 0, RET_ERRNO | errno.ENOSYS))
    assert len(body) == i_enosys + 1 and all(jt < 256 for _, jt, _, _ in body)
    return head + body


def install() -> None:
    """Apply the filter to this process (needs no_new_privs or CAP_SYS_ADMIN); raises OSError on failure."""
    prog = program()
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter: {os.strerror(err)}")
