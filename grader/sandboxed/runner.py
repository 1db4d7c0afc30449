"""The cell runner: the only grader code that runs INSIDE the sandbox.

It executes a rebuilt submission cell by cell in one IPython InteractiveShell
(no Jupyter kernel, no ZMQ, no TCP port) and writes control lines between the
cells' outputs on its stdout, which the trusted supervisor outside the sandbox
reads through a pipe:

    \\n\\x1e<nonce> <event> <json>\\n

Nothing here is trusted. The student's code runs in this very process and can
rewrite anything in it (this file included, in memory): the supervisor uses the
control lines only to attribute output to cells and to time cells, never to
award points. Points come from the arrays that the hidden tests export to
/exports and that the supervisor compares, after this process is dead, with
references it computes itself.

Only the standard library and IPython are used here; the file is copied into
the sandbox, run with the course's virtual environment, as an unprivileged
user, in a private mount/network/PID namespace (see grader/trusted/supervisor.py).
"""

import gc
import json
import os
import signal
import sys
import time
import warnings



class CellTimeout(BaseException):
    """Raised in a cell that ran longer than the per-cell time limit."""


def not_available(rule, user_ns) -> None:
    """The course's rule, in words, for a library the sandbox does not hold (transformer_course/exercise_rule.py).

    What is importable is decided by the file system: the sandbox's site-packages holds only the allowed
    distributions. This finder, consulted after every other one has found nothing, acts on the names installed on
    the machine but left out:

    * imported by the student's cells (``import torch`` in a set-up cell, ``from scipy.special import erf``), the
      name is bound to a stand-in whose every use -- a call, an attribute's call, arithmetic, conversion -- raises
      the rule's message. So an import costs nothing by itself, and an exercise scores 0 only if it needs the
      library -- as Validate judges it (the library is installed there, and watched inside the exercises only);
    * imported by anything else (an allowed library's optional import, the course package), the import fails with
      the rule's message, as a missing module does.

    Removing it changes the message and when it comes, never what can be used."""
    if not rule or not rule.get("names"):
        return
    import importlib
    import importlib.abc
    import importlib.machinery
    import types

    names, message = frozenset(rule["names"]), rule["message"]
    machinery = {importlib.__file__}

    def refuse(what):
        return ModuleNotFoundError(message.replace("{name}", what.partition(".")[0]), name=what)

    class Unavailable:
        """What ``name`` stands for while grading: every use says the rule."""

        __slots__ = ("_name",)

        def __init__(self, name):
            object.__setattr__(self, "_name", name)

        def __getattr__(self, attr):
            if attr.startswith("__") and attr.endswith("__"):
                raise AttributeError(attr)
            return Unavailable(f"{self._name}.{attr}")

        def _refuse(self, *args, **kwargs):
            raise refuse(self._name)

        __call__ = __iter__ = __len__ = __bool__ = __getitem__ = __setitem__ = __contains__ = _refuse
        __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
        __matmul__ = __rmatmul__ = __pow__ = __neg__ = __float__ = __int__ = __index__ = __array__ = _refuse
        __enter__ = __mro_entries__ = _refuse

        def __repr__(self):
            return f"<{self._name}: not available while grading>"

    class NotAvailableModule(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__") and attr.endswith("__"):
                raise AttributeError(attr)
            return Unavailable(f"{self.__name__}.{attr}")

    class StandIn(importlib.abc.Loader):
        def create_module(self, spec):
            module = NotAvailableModule(spec.name)
            module.__path__ = []                   # a package: `import scipy.special` goes on to the stand-in
            return module

        def exec_module(self, module):
            pass

    class NotAvailableWhileGrading(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.partition(".")[0] not in names:
                return None
            frame = sys._getframe(1)
            while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                         or frame.f_code.co_filename in machinery):
                frame = frame.f_back
            if frame is not None and frame.f_globals is user_ns:          # the student's own cells
                return importlib.machinery.ModuleSpec(fullname, StandIn(), is_package=True)
            raise refuse(fullname)

    sys.meta_path.append(NotAvailableWhileGrading())


def main(job_file: str = "/grading/job.json") -> None:
    with open(job_file, encoding="utf-8") as fh:
        job = json.load(fh)
    nonce = job["nonce"]
    timeout = float(job["cell_timeout"])
    my_pid = os.getpid()
    # PID 1 of a private PID namespace: kill(-1) reaches only the submission's own processes.
    in_pid_namespace = bool(job.get("pid_namespace")) and os.getpid() == 1

    def control(event, payload=None):
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 -- a student may have replaced the stream
                pass
        line = "\n\x1e%s %s %s\n" % (nonce, event, json.dumps(payload or {}))
        os.write(1, line.encode())

    for path in job.get("sys_path", []):
        sys.path.insert(0, path)

    # Warnings a headless run produces on every plot: noise, not the student's doing.
    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    warnings.filterwarnings("ignore", message=".*FigureCanvasAgg.*")

    from traitlets.config import Config
    from IPython.core.interactiveshell import InteractiveShell

    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "nocolor"
    cfg.InteractiveShell.xmode = "Context"
    t0 = time.monotonic()
    shell = InteractiveShell.instance(config=cfg)
    not_available(job.get("not_available"), shell.user_ns)
    if job.get("timing"):
        os.write(1, f"timing: shell {time.monotonic() - t0:.3f} s\n".encode())

    def on_alarm(signum, frame):
        raise CellTimeout(f"cell ran longer than {timeout:g} s")

    def describe(exc):
        if exc is None:
            return None
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001
            text = "<unprintable>"
        return {"ename": type(exc).__name__, "evalue": text[:500]}

    def tidy(collect=False):
        """Between cells: stray processes, zombies, figures, the last traceback's frames."""
        if os.getpid() != my_pid:          # a forked child that ran on: stop it here
            os._exit(0)
        if in_pid_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # inside our own PID namespace only
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            try:
                plt.close("all")
            except Exception:  # noqa: BLE001
                pass
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                try:
                    setattr(sys, name, None)
                except Exception:  # noqa: BLE001
                    pass
        if collect:                          # after a MemoryError: free what the failed cell held
            gc.collect()

    # A forked copy of this process runs at the lowest priority, so that a fork bomb cannot starve
    # the cells (the copies are killed after every cell anyway, see tidy()).
    os.register_at_fork(after_in_child=lambda: os.nice(19))

    control("ready", {"pid": my_pid})
    for cell in job["cells"]:
        index = cell["index"]
        control("start", {"cell": index})
        for number, chunk in enumerate(cell["chunks"]):
            control("chunk", {"cell": index, "chunk": number, "hidden": bool(chunk.get("hidden"))})
            started = time.monotonic()
            error = None
            signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            skipped = False
            try:
                result = shell.run_cell(chunk["code"], store_history=False)
                error = result.error_before_exec or result.error_in_exec
            except BaseException as exc:  # noqa: BLE001 -- CellTimeout outside the user's code
                error = exc
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if type(error).__name__ == "SkippedWhileGrading":
                # transformer_course.testing.skip_while_grading: the rest of the cell needs what the grader does
                # not offer (a comparison with PyTorch or the package's twin); its note is the cell's output
                error, skipped = None, True
            outcome = {"cell": index, "chunk": number, "seconds": round(time.monotonic() - started, 3),
                       "error": describe(error), "timeout": isinstance(error, CellTimeout), "skipped": skipped}
            result = error = None
            shell.last_execution_result = None
            tidy(collect=bool(outcome["error"]) and outcome["error"]["ename"] == "MemoryError")
            control("result", outcome)
        control("end", {"cell": index})
    control("done", {})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/grading/job.json")
