"""What a sandboxed run exported, read after the sandbox is dead.

Regular files directly in the job's export folder only, opened without following links,
owned by the job's sandbox user, with one link, bounded in size. Part of the sandbox
(supervisor.py runs the job, sandbox_users.py owns the uid).
"""

from __future__ import annotations

import os
import stat as _stat
from pathlib import Path

MAX_EXPORT_FILE = 64 << 20
MAX_EXPORT_TOTAL = 256 << 20


def read_exports(folder: Path, uid: int) -> tuple[dict[str, bytes], dict[str, str]]:
    """Regular files directly in the export folder, opened without following links, bounded.

    Returns the files' bytes by name, and why other entries were refused (a link, a FIFO,
    a device, a hard link, not the sandbox user's, too large).
    """
    out: dict[str, bytes] = {}
    refused: dict[str, str] = {}
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return out, refused
    total = 0
    try:
        for name in sorted(os.listdir(dfd))[:1000]:
            if not (name.endswith(".npz") or name.endswith(".error.json")) or name.startswith("."):
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if not _stat.S_ISREG(st.st_mode):
                kind = ("a symbolic link" if _stat.S_ISLNK(st.st_mode) else "a FIFO" if _stat.S_ISFIFO(st.st_mode)
                        else "a directory" if _stat.S_ISDIR(st.st_mode) else "not a regular file")
                refused[name] = f"the exported file is {kind}: refused"
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as exc:
                refused[name] = f"the exported file cannot be opened ({exc.strerror})"
                continue
            try:
                st = os.fstat(fd)
                if not _stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != uid:
                    refused[name] = "the exported file is not a plain file written by the submission: refused"
                    continue
                if st.st_size > MAX_EXPORT_FILE or total + st.st_size > MAX_EXPORT_TOTAL:
                    refused[name] = f"the exported file is too large ({st.st_size:,} bytes): refused"
                    continue
                chunks = []
                remaining = st.st_size + 1
                while remaining > 0:
                    block = os.read(fd, min(remaining, 1 << 20))
                    if not block:
                        break
                    chunks.append(block)
                    remaining -= len(block)
                data = b"".join(chunks)
                if len(data) > st.st_size:
                    refused[name] = "the exported file grew while it was read: refused"
                    continue
                total += len(data)
                out[name] = data
            finally:
                os.close(fd)
    finally:
        os.close(dfd)
    return out, refused
