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
    """A hidden-test case: how to draw inputs, how to compute the expected outputs."""

    make_inputs: Callable[[np.random.Generator], dict]
    reference: Callable[..., tuple]
    output_names: tuple[str, ...]
    tol: float = 1e-6
    description: str = ""


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
        for name, g, e in zip(names, got, self.expected()):
            assert_close(g, e, f"{self.case_id} {name} (seed {self.seed})", tol=self.spec.tol)


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
