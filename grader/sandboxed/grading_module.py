"""``transformer_course.grading`` as the sandbox sees it (export only).

The grader copies this file over ``transformer_course/grading.py`` in
the copy of the package that the sandboxed run imports. It has no case
generators and no reference implementation: ``hidden_case(id)`` reads the
inputs that the trusted grader drew and wrote to ``COURSE_GRADING_INPUTS``,
and ``check(result)`` only saves the result as plain arrays to
``COURSE_GRADING_EXPORT``. Whether the result is right is decided outside the
sandbox, after the student's process is dead, by comparing those arrays with
references that the sandbox never sees.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

EXPORT_ENV = "COURSE_GRADING_EXPORT"
INPUTS_ENV = "COURSE_GRADING_INPUTS"

__all__ = ["hidden_case", "HiddenCase"]


def _safe(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", case_id)


def _decode(node, arrays):
    kind = node["kind"]
    if kind == "array":
        return arrays[node["key"]].copy()
    if kind == "value":
        return node["value"]
    if kind == "list":
        return [_decode(item, arrays) for item in node["items"]]
    if kind == "tuple":
        return tuple(_decode(item, arrays) for item in node["items"])
    if kind == "dict":
        return {key: _decode(item, arrays) for key, item in node["items"].items()}
    raise ValueError(f"unknown input kind {kind!r}")


class HiddenCase:
    """A hidden test's inputs, and an export of the result (no comparison here)."""

    def __init__(self, case_id: str, inputs: dict, output_names: tuple):
        self.case_id = case_id
        self.inputs = inputs
        self.output_names = tuple(output_names)

    def __repr__(self) -> str:
        return f"HiddenCase({self.case_id!r})"

    def expected(self):
        raise RuntimeError("the reference results are not available while grading")

    def check(self, result) -> None:
        got = result if isinstance(result, tuple) else (result,)
        names = self.output_names
        if len(got) != len(names):
            _export_error(self.case_id, f"expected {len(names)} output(s) {names}, got {len(got)}")
            raise AssertionError(f"{self.case_id}: expected {len(names)} output(s) {names}, got {len(got)}")
        arrays = {}
        for name, value in zip(names, got):
            try:
                arr = np.asarray(value)
            except Exception as exc:  # noqa: BLE001
                _export_error(self.case_id, f"{name}: cannot be turned into an array ({type(exc).__name__})")
                raise AssertionError(f"{self.case_id} {name}: not an array") from None
            if arr.dtype.kind not in "biuf":
                _export_error(self.case_id, f"{name}: expected a numeric array, got dtype {arr.dtype} "
                                            f"({type(value).__name__})")
                raise AssertionError(f"{self.case_id} {name}: expected a numeric array, got {type(value).__name__}")
            arrays[name] = np.array(arr, copy=True)
        _export(self.case_id, arrays)


def _export_dir():
    folder = os.environ.get(EXPORT_ENV)
    if not folder:
        raise RuntimeError(f"{EXPORT_ENV} is not set: hidden tests run only while grading")
    return folder


def _export(case_id: str, arrays: dict) -> None:
    folder = _export_dir()
    final = os.path.join(folder, _safe(case_id) + ".npz")
    tmp = os.path.join(folder, f".{_safe(case_id)}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, final)


def _export_error(case_id: str, reason: str) -> None:
    folder = _export_dir()
    final = os.path.join(folder, _safe(case_id) + ".error.json")
    tmp = final + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"reason": reason[:300]}, fh)
    os.replace(tmp, final)


def hidden_case(case_id: str) -> HiddenCase:
    """The inputs of hidden case ``case_id``, as drawn by the grader for this run."""
    folder = os.environ.get(INPUTS_ENV)
    if not folder:
        raise RuntimeError(f"{INPUTS_ENV} is not set: hidden tests run only while grading")
    with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    if case_id not in manifest:
        raise KeyError(f"unknown hidden case {case_id!r}")
    entry = manifest[case_id]
    with np.load(os.path.join(folder, entry["file"]), allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return HiddenCase(case_id, _decode(entry["inputs"], arrays), entry["output_names"])
