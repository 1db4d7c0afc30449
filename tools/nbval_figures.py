"""nbval plugin: compare the figures too.

nbval skips image/png (unless it runs with nbdime), so a figure whose pixels depend on the BLAS
kernel would pass `make test` and still change the committed solutions on the next `make`. With
`-p tools.nbval_figures` every figure of a re-executed cell must be the same picture as the
committed one, by the rule `make` itself uses to keep a re-drawn figure (tools/course.py,
`same_picture`: antialiasing noise of at most PICTURE_MAX_LEVELS on at most PICTURE_MAX_PIXELS of
the pixels). Cells tagged nbval-ignore-output are not compared at all, as in plain nbval.

It also starts nbval's kernels over IPC sockets instead of TCP (CourseKernelManager below).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbval.kernel
from jupyter_client.manager import KernelManager
from nbval.plugin import IPyNbCell

sys.path.insert(0, str(Path(__file__).resolve().parent))
from course import KERNEL_TRANSPORT, PICTURE_MAX_LEVELS, PICTURE_MAX_PIXELS, ipc_prefix, same_picture  # noqa: E402


class CourseKernelManager(KernelManager):
    """nbval's kernels over the course's transport (IPC sockets, tools/course.py), like every kernel the course
    starts: nbval builds its KernelManager without a configuration, so the transport is given here."""

    def __init__(self, **kwargs):
        kwargs.setdefault("transport", KERNEL_TRANSPORT)
        kwargs.setdefault("ip", ipc_prefix())            # an absolute socket name of its own (tools/course.py)
        super().__init__(**kwargs)


nbval.kernel.KernelManager = CourseKernelManager

_compare_text = IPyNbCell.compare_outputs


def figures(outputs) -> list[str]:
    """The base64 PNGs among a cell's outputs, in order."""
    return [out["data"]["image/png"] for out in outputs if "image/png" in out.get("data", {})]


def compare_outputs(self, test, ref, skip_compare=None):
    if not _compare_text(self, test, ref, skip_compare):
        return False
    got, want = figures(test), figures(ref)
    if len(got) != len(want):
        self.comparison_traceback.append(f"the cell drew {len(got)} figure(s); the committed one has {len(want)}")
        return False
    for i, (a, b) in enumerate(zip(want, got)):
        if not same_picture(a, b):
            self.comparison_traceback.append(
                f"figure {i + 1} of this cell is not the same picture as the committed one: more than "
                f"antialiasing noise (> {PICTURE_MAX_LEVELS} levels, or > {PICTURE_MAX_PIXELS:.1%} of the "
                "pixels). A plotted quantity depends on round-off, or the solutions are stale (`make solutions`).")
            return False
    return True


IPyNbCell.compare_outputs = compare_outputs
