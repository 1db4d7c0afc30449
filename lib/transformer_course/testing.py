"""Checks for the notebooks' visible tests: relative error against a reference, with a clear message; and the
course's rule for what an exercise may use, applied in the notebook's own kernel as the grader applies it.

Importing this module in a Jupyter kernel (every notebook does, for ``assert_close``) holds the notebook's
exercises to the rule: while one of them runs, a call into a library the grader does not offer, or into the
package's own version of this notebook's exercise, fails with the grader's message (exercise_rule.py). So
Validate and Run All say what the grader will say. :func:`cross_check` starts a comparison with such a
reference outside the exercises: it runs in the student's kernel and is skipped, with a note, while grading.
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from . import exercise_rule


def rel_error(actual, expected) -> float:
    """Largest relative error ``|a - e| / max(1e-8, |a| + |e|)`` over all entries (CS231n style)."""
    a = np.asarray(actual, dtype=float)
    e = np.asarray(expected, dtype=float)
    if a.shape != e.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    same_inf = (a == e) & np.isinf(e)
    with np.errstate(invalid="ignore"):          # inf - inf and inf / inf are handled just below
        diff = np.where(same_inf, 0.0, np.abs(a - e))
        err = diff / np.maximum(1e-8, np.abs(a) + np.abs(e))
    return float(np.nanmax(np.where(np.isnan(err), np.inf, err)))


def _distinct_digits(expected: float, actual: float) -> tuple[str, str]:
    """The two numbers with 6 significant digits, or as many more (up to 17) as it takes for them to
    differ in print: "expected 1.73154, got 1.73154" says nothing about a tiny error."""
    for digits in range(6, 18):
        want, got = f"{expected:.{digits}g}", f"{actual:.{digits}g}"
        if want != got:
            break
    return want, got


def assert_close(actual, expected, name: str = "result", *, tol: float = 1e-6, quiet: bool = False) -> None:
    """Assert that ``actual`` matches ``expected`` in shape and value, and say so.

    On success it prints ``name: relative error < tol`` -- the bound that was checked,
    not the error itself: the last digits of a relative error are round-off, which
    changes with the BLAS kernel, the thread count and the CPU, while the bound does
    not. (Call ``rel_error`` for the number itself.) It returns None, so a test cell
    that ends in ``assert_close(...)`` shows no ``Out:`` value, which nbgrader would
    read as a partial score.

    Raises ``AssertionError`` saying what was expected and what came: the wrong
    type, the wrong shape, NaN where a number was due, or the largest relative
    error, where it is and the two values there.
    """
    if actual is None:
        raise AssertionError(f"{name}: got None -- did the function forget to `return`?")
    try:
        a = np.asarray(actual, dtype=float)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"{name}: expected a numeric array, got {type(actual).__name__} ({exc})") from None
    e = np.asarray(expected, dtype=float)
    if a.shape != e.shape:
        raise AssertionError(f"{name}: expected shape {e.shape}, got shape {a.shape}")
    if np.isnan(a).any() and not np.isnan(e).any():
        if a.ndim == 0:   # a single number: no index to name
            raise AssertionError(f"{name}: the value is NaN; expected a finite value")
        raise AssertionError(f"{name}: contains NaN at {np.argwhere(np.isnan(a))[0].tolist()}; expected finite values")
    err = rel_error(a, e)
    if not err <= tol:
        where = np.unravel_index(np.argmax(np.abs(a - e)), a.shape) if a.ndim else ()
        at = f" at index {tuple(int(i) for i in where)}" if a.ndim else ""   # a single number: "the value"
        if e[where] == 0:
            # A relative error against an expected 0 is 1 whatever came: say the absolute error instead.
            # (The relative error's denominator has a floor of 1e-8, so near 0 the test allows tol * 1e-8.)
            raise AssertionError(
                f"{name}: expected 0{at}, got {a[where]:.6g}: absolute error "
                f"{abs(float(a[where])):.2e} exceeds {tol * 1e-8:.0e} (the tolerance near 0)"
            )
        want, got = _distinct_digits(float(e[where]), float(a[where]))
        raise AssertionError(
            f"{name}: relative error {err:.2e} exceeds {tol:.0e}; "
            + (f"at index {tuple(int(i) for i in where)} " if a.ndim else "for the value: ")
            + f"expected {want}, got {got}"
        )
    if not quiet:
        print(f"{name}: relative error < {tol:.0e}")


def central_differences(f, x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences ``(f(x + h e_i) - f(x - h e_i)) / 2h`` of the scalar ``f()`` over every entry of
    ``x``, which ``f`` reads; each entry is restored afterwards. The course's tests check hand-written
    gradients against it (notebook 10, section 1: the error is smallest near h = 1e-5 in float64)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f()
        x[i] = old - h
        down = f()
        x[i] = old
        grad[i] = (up - down) / (2 * h)
    return grad


def grading() -> bool:
    """True while the grader (or nbgrader's autograde) runs the notebook."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


def cross_check(what: str, library: str | None = None):
    """Begin a comparison with a reference the grader does not offer: PyTorch, or the package's own version of
    this notebook's exercise. ``what`` says what is compared with what.

    Prints ``cross-check: <what>`` and returns True (or the imported ``library`` module) where it can run; while
    grading, prints that it is skipped and returns None (the graded tests never need it: it costs no points);
    without ``library`` installed, prints how to install it and returns None. Use it as
    ``if cross_check("your softmax against the package's"):`` or ``torch = cross_check("...", "torch")``.
    """
    if grading():
        print(f"cross-check skipped while grading: {what} (the grader does not offer the reference; "
              f"this costs no points)")
        return None
    module = True
    if library is not None:
        try:
            module = importlib.import_module(library)
        except ImportError:
            extra = " (pip install -e '.[torch]')" if library == "torch" else ""
            print(f"cross-check skipped: {what} needs {library}, which is not installed{extra}")
            return None
    print(f"cross-check: {what}")
    return module


class SkippedWhileGrading(Exception):
    """Raised by :func:`skip_while_grading`: the rest of the cell needs what the grader does not offer. IPython shows
    only its note (no traceback), and the grader's runner counts the cell as skipped, not failed."""

    def _render_traceback_(self):              # IPython prints these lines instead of a traceback
        return [str(self)]


def skip_while_grading(what: str) -> None:
    """While grading, stop the cell here, saying ``what`` is skipped (it needs PyTorch, the package's own version of
    this notebook's exercises or a library the grader does not offer); elsewhere, do nothing. The graded tests
    never depend on such a cell: it costs no points."""
    if grading():
        raise SkippedWhileGrading(f"skipped while grading: {what} (it needs what the grader does not offer; "
                                  f"this costs no points)")


exercise_rule.watch()
