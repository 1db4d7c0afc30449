"""Disk for the hub's users: a fixed-size home per student, a bounded exchange, private /tmp (hub/README.md).

Only the standard library (+ mkfs.ext4, mount, umount from e2fsprogs and util-linux); runs as
root. Quotas would be the usual tool, but they need a kernel with CONFIG_QUOTA and a filesystem
mounted with quota options: this build machine's kernel has neither ("EXT4-fs: The kernel was
not built with CONFIG_QUOTA and CONFIG_QFMT_V2"). What works on any Linux host with loop devices:

* **homes**: each student's home is its own ext4 filesystem of ``home_mb`` (a sparse image file
  in the hub's state folder, ``STATE/volumes/<user>.img``, mounted on the home with nosuid,
  nodev): a student who writes without end fills their own home, nobody else's and not the
  host's disk. The image takes on disk only what the student wrote;
* **the exchange**: the same, one filesystem of ``exchange_mb`` for the whole class: a
  student's inbound writes cannot fill the host's disk (they can fill the exchange: every
  entry is theirs, so ``du`` names them);
* **/tmp, /var/tmp, /dev/shm**: each server gets its own (``private_tmp``, called by the
  spawner before it drops root): a new mount namespace with a tmpfs of ``tmp_mb`` on each,
  counted in the student's memory cgroup while used, and gone with the last process of that
  server: files there cannot outlive it, nor be seen by another user.

A host with real quotas can set ``TC_HUB_HOME_MB=0`` (plain homes) and use ``setquota``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 1 << 18
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
LIBC = ctypes.CDLL(None, use_errno=True)      # loaded here, never in a forked child


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def private_tmp(size_mb: int) -> None:
    """This process (root, about to become a user's server) gets its own /tmp, /var/tmp, /dev/shm.

    A new mount namespace, made private (nothing propagates to or from the host), and a fresh
    tmpfs of ``size_mb`` MiB, mode 1777, nosuid, nodev, on each folder. Everything the server
    starts inherits it; it is freed when the last of them exits.
    """
    _check(LIBC.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    options = f"size={int(size_mb)}m,mode=1777".encode()
    for folder in PRIVATE_DIRS:
        if os.path.isdir(folder):
            _check(LIBC.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options),
                   f"mount tmpfs on {folder}")


def private_tmp_works() -> bool:
    """Can this host give a server its own mount namespace (tried in a throw-away child)?"""
    pid = os.fork()
    if pid == 0:
        try:
            _check(LIBC.unshare(CLONE_NEWNS), "unshare")
            _check(LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "private")
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip() or done.stdout.strip()}")


def ensure_volume(image: Path, mountpoint: Path, size_mb: int, uid: int, gid: int, mode: int) -> bool:
    """An ext4 filesystem of ``size_mb`` in ``image`` (made once, sparse) mounted on ``mountpoint``.

    The first time, what is in ``mountpoint`` already (a new home's skeleton files) is copied
    in. Its top folder belongs to uid:gid with ``mode``; lost+found is removed. Returns True
    if it mounted something now, False if it was mounted already.
    """
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(mountpoint):
        return False
    if not image.exists():
        image.parent.mkdir(parents=True, exist_ok=True)
        image.parent.chmod(0o700)
        with open(image, "wb") as f:
            f.truncate(int(size_mb) * 2**20)
        image.chmod(0o600)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", f"root_owner={uid}:{gid}", str(image)])
        # what the folder holds already (useradd's skeleton files) moves into the new filesystem
        staging = image.with_name(image.stem + ".new")
        staging.mkdir(exist_ok=True)
        _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(staging)])
        try:
            shutil.rmtree(staging / "lost+found", ignore_errors=True)
            for p in mountpoint.iterdir():
                _run(["cp", "-a", str(p), str(staging)])
        finally:
            _run(["umount", str(staging)])
            staging.rmdir()
        for p in list(mountpoint.iterdir()):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(mountpoint)])
    os.chown(mountpoint, uid, gid)
    mountpoint.chmod(mode)
    return True


def release_volume(mountpoint: Path, image: Path | None = None) -> None:
    """Unmount (its processes must be gone) and, if given, delete the image."""
    if os.path.ismount(mountpoint):
        _run(["umount", str(mountpoint)])
    if image is not None and image.exists():
        image.unlink()


def usage(mountpoint: Path) -> dict:
    """Size and use of a mounted volume, in bytes."""
    st = os.statvfs(mountpoint)
    return {"size": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize,
            "used": (st.f_blocks - st.f_bfree) * st.f_frsize, "mounted": os.path.ismount(mountpoint)}
