"""The notebooks' hidden-test cases, whose inputs are drawn at grading time.

A package of its own, beside the concept package it checks: each notebook's cases
(``cases_NN_*.py``: input generators and references) compute their references with the
concept modules of ``transformer_course``. Notebooks reach it through the one module of
the concept package that imports it, ``transformer_course.grading`` (``hidden_case``);
the grader's sandbox never gets this package at all (grader/README.md, the package rule).

The course repository is public, so the hidden tests' code is no secret. What
keeps them meaningful is their input: each case draws it from a generator
seeded by ``COURSE_GRADING_SEED`` (set by the instructor when grading; without
it a fresh random seed is drawn every run), so nobody can hard-code answers.

A hidden test cell reads::

    case = hidden_case("attention.softmax")
    case.check(softmax(**case.inputs))

``check`` compares with the course's reference implementation (tolerances,
never exact floats) and, when ``COURSE_GRADING_EXPORT`` names a folder, also
saves the plain output arrays there so a trusted process outside the student's
kernel can compare them itself (the autograder does; see ``grader/``).
"""

from __future__ import annotations

import copy
import os
import re
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from transformer_course.testing import assert_close

SEED_ENV = "COURSE_GRADING_SEED"
EXPORT_ENV = "COURSE_GRADING_EXPORT"
_SESSION_SEED = secrets.randbits(32)


def grading_seed() -> int:
    """The instructor's seed from the environment, or a fresh random one for this process."""
    raw = os.environ.get(SEED_ENV)
    if raw is None or raw == "":
        return _SESSION_SEED
    try:
        return int(raw)
    except ValueError:
        return zlib.crc32(raw.encode())


def case_rng(case_id: str, seed: int | None = None) -> np.random.Generator:
    """A generator that depends on the grading seed and the case id only."""
    seed = grading_seed() if seed is None else seed
    # SeedSequence wants non-negative entries: fold any integer (e.g. -1) into 64 bits.
    return np.random.default_rng([int(seed) % 2**64, zlib.crc32(case_id.encode())])


@dataclass(frozen=True)
class Case:
    """A hidden-test case: how to draw inputs, how to compute the expected outputs.

    ``tol`` bounds the relative error ``|a - e| / max(1e-8, |a| + |e|, floor * max|e|)`` of every entry
    (:func:`relative_errors`). With ``floor = 0`` (the default) that is the notebooks' ``assert_close``
    measure, entry by entry; ``floor = 1`` measures each entry's error against the output's own scale
    (its largest finite magnitude) at least -- the right measure where a correct computation's
    round-off is bounded relative to the whole output, not to each entry (an entry that cancels to
    ~0 keeps the absolute error of its terms).

    ``dtypes``, one per output, says what the docstring promises: a dtype name (``"float32"``), or
    ``"integer"``/``"floating"`` for any dtype of that kind; None (or no ``dtypes``) accepts any
    number. A result of another dtype fails the case (:func:`dtype_mismatch`).
    """

    make_inputs: Callable[[np.random.Generator], dict]
    reference: Callable[..., tuple]
    output_names: tuple[str, ...]
    tol: float = 1e-6
    description: str = ""
    dtypes: tuple | None = None
    floor: float = 0.0

    def dtype_of(self, index: int):
        return None if self.dtypes is None else self.dtypes[index]

    def as_promised(self, outputs) -> tuple:
        """The reference's ``outputs`` in the dtypes the case promises (a float32 case's reference is
        computed in float64): what a correct function returns, for tests of the cases themselves."""
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return tuple(o if self.dtype_of(i) in (None, "integer", "floating") else np.asarray(o).astype(self.dtype_of(i))
                     for i, o in enumerate(outputs))


def dtype_mismatch(got, want) -> str:
    """'' when ``got`` has the dtype a case asks for (``want``: a dtype name, "integer", "floating" or
    None for any); otherwise a short reason. The grader (grader/trusted/compare.py) and
    :meth:`HiddenCase.check` both apply this rule."""
    if want is None:
        return ""
    try:
        dtype = np.asarray(got).dtype
    except Exception:  # noqa: BLE001 -- not an array at all: the value check says so
        return ""
    if want == "integer":
        ok = dtype.kind in "iu"
    elif want == "floating":
        ok = dtype.kind == "f"
    else:
        ok = dtype == np.dtype(want)
    return "" if ok else f"expected dtype {want}, got {dtype}"


def relative_errors(a: np.ndarray, e: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """``|a - e| / max(1e-8, |a| + |e|, floor * max|e|)`` entry by entry, for float64 arrays of one shape
    (the caller leaves out NaN and infinite entries). The grader and :meth:`HiddenCase.check` both use it."""
    denominator = np.maximum(1e-8, np.abs(a) + np.abs(e))
    if floor and e.size:
        finite = np.abs(e[np.isfinite(e)])
        if finite.size:
            denominator = np.maximum(denominator, floor * float(finite.max()))
    with np.errstate(all="ignore"):
        return np.abs(a - e) / denominator


CASES: dict[str, Case] = {}
# exercise -> the package's functions/classes that compute it under another name (its twins), from
# each cases module's TWINS. The grader blocks these, and every package name an exercise has, in the
# notebook's sandbox (grader/trusted/package.py); a same-named twin needs no entry.
TWINS: dict[str, tuple[str, ...]] = {}


@dataclass
class HiddenCase:
    case_id: str
    inputs: dict
    seed: int
    spec: Case = field(repr=False)
    # A private copy of the inputs: a student function that changes its arguments in
    # place (x -= mean) must not change what the reference is computed from.
    pristine: dict = field(default=None, repr=False)

    def __post_init__(self):
        if self.pristine is None:
            self.pristine = copy.deepcopy(self.inputs)

    def expected(self) -> tuple:
        out = self.spec.reference(**copy.deepcopy(self.pristine))
        return out if isinstance(out, tuple) else (out,)

    def check(self, result) -> None:
        """Compare the student's result with the reference; export it when grading."""
        got = result if isinstance(result, tuple) else (result,)
        names = self.spec.output_names
        if len(got) != len(names):
            raise AssertionError(
                f"{self.case_id}: expected {len(names)} output(s) {names}, got {len(got)}"
            )
        export_dir = os.environ.get(EXPORT_ENV)
        if export_dir:
            _export(export_dir, self.case_id, dict(zip(names, got)))
        for index, (name, g, e) in enumerate(zip(names, got, self.expected())):
            label = f"{self.case_id} {name} (seed {self.seed})"
            reason = dtype_mismatch(g, self.spec.dtype_of(index))
            if reason:
                raise AssertionError(f"{label}: {reason}")
            if self.spec.floor:
                reason = scaled_mismatch(g, e, self.spec.tol, self.spec.floor)
                if reason:
                    raise AssertionError(f"{label}: {reason}")
            else:
                assert_close(g, e, label, tol=self.spec.tol)


def scaled_mismatch(got, expected, tol: float, floor: float) -> str:
    """'' when ``got`` matches ``expected`` to ``tol`` in the measure of :func:`relative_errors` with
    ``floor``; otherwise a short reason (shape, NaN, infinities, the largest error and where)."""
    try:
        a = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"expected a numeric array, got {type(got).__name__}"
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        return f"expected shape {e.shape}, got shape {a.shape}"
    if a.size == 0:
        return ""
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if (nan_a != nan_e).any():
        where = tuple(int(i) for i in np.argwhere(nan_a != nan_e)[0])
        return f"NaN at index {where} where a number was expected" if nan_a[where] else \
            f"a number at index {where} where NaN was expected"
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    bad_inf = (inf_a | inf_e) & ~((a == e) & inf_e)
    if bad_inf.any():
        return f"infinite value mismatch at index {tuple(int(i) for i in np.argwhere(bad_inf)[0])}"
    ok = ~(nan_a | inf_e)
    err = np.where(ok, relative_errors(np.where(ok, a, 0.0), np.where(ok, e, 0.0), floor), 0.0)
    worst = float(err.max())
    if worst <= tol:
        return ""
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape)) if err.ndim else ()
    scale = " (against the output's scale)" if floor else ""
    return f"relative error {worst:.1e}{scale} at index {where} (tolerance {tol:.0e})"


def _export(folder: str, case_id: str, outputs: dict) -> None:
    arrays = {}
    for name, value in outputs.items():
        try:
            arrays[name] = np.array(value, dtype=np.float64, copy=True)
        except (TypeError, ValueError):
            arrays[name] = np.array(np.nan)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", case_id)
    os.makedirs(folder, exist_ok=True)
    np.savez(os.path.join(folder, safe + ".npz"), **arrays)


def hidden_case(case_id: str, seed: int | None = None) -> HiddenCase:
    """Draw the inputs of a registered case from the grading seed (or from ``seed`` when given).

    The autograder (grader/) calls this OUTSIDE the sandbox with its own secret seed,
    writes the inputs for the sandboxed run and compares what the run exported with
    ``expected()`` itself; inside the sandbox this module is replaced by an export-only
    version that has no references (grader/sandboxed/grading_module.py).
    """
    if case_id not in CASES:
        raise KeyError(f"unknown hidden case {case_id!r}; known: {sorted(CASES)}")
    seed = grading_seed() if seed is None else int(seed)
    spec = CASES[case_id]
    return HiddenCase(case_id, spec.make_inputs(case_rng(case_id, seed)), seed, spec)



# Each notebook's cases live in their own module (cases_NN_*.py) and register
# themselves in CASES when imported; import them all.
def _load_case_modules() -> None:
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("cases_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for exercise, twins in getattr(module, "TWINS", {}).items():
                TWINS[exercise] = TWINS.get(exercise, ()) + tuple(twins)


_load_case_modules()
