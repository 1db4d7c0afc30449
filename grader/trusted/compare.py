"""The trusted side of the hidden tests: draw the inputs, compare what came back.

Runs in the grader's own process, never in the sandbox. For each hidden case of
a notebook it draws the inputs from a seed the sandbox never sees, writes them
as plain arrays (plus a JSON manifest) for the sandboxed run, computes the
expected outputs with the full course package, and afterwards compares the
arrays the run exported: loaded with ``allow_pickle=False``, size-checked
before decompression, numeric dtype (the very dtype where the case says what the
docstring promises), exact shape, no NaN where the reference is finite, infinities in
the same places, relative error within the case's tolerance (the notebooks'
``assert_close`` measure, or against the output's scale where the case asks for it:
``transformer_course_cases.Case``).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def _safe(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", case_id)


def derive_seed(run_seed: int, student: str, assignment: str, content: bytes) -> int:
    """The seed of one submission's hidden inputs: HMAC-SHA256 keyed by the run's secret seed over
    the student, the notebook and a digest of exactly what runs (the rebuilt cells, the extra files).

    A regrade of the SAME submission with the same COURSE_GRADING_SEED draws the same inputs
    (reproducible); any change to the submission -- a lookup table of inputs printed in an earlier
    run's feedback included -- draws new ones, so answers cannot be replayed.
    """
    message = json.dumps([student, assignment, hashlib.sha256(content).hexdigest()]).encode()
    digest = hmac.new(str(run_seed).encode(), message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little")


# --------------------------------------------------------------------------- inputs
def _encode(value, arrays: dict, path: str):
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(value)
        return {"kind": "array", "key": key}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"kind": "value", "value": value}
    if isinstance(value, tuple):
        return {"kind": "tuple", "items": [_encode(v, arrays, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return {"kind": "list", "items": [_encode(v, arrays, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"kind": "dict", "items": {k: _encode(v, arrays, f"{path}[{k!r}]") for k, v in value.items()}}
    raise TypeError(f"hidden-case input {path} of type {type(value).__name__} cannot be passed to the sandbox "
                    f"(use arrays, numbers, strings, None, and lists/tuples/dicts of them)")


@dataclass
class Prepared:
    """The inputs and the expected outputs of one notebook's hidden cases for one submission."""

    seed: int
    expected: dict[str, tuple]          # case id -> reference outputs
    output_names: dict[str, tuple]
    tolerance: dict[str, float]
    dtypes: dict[str, tuple] = field(default_factory=dict)   # case id -> the promised dtype per output (or None)
    floor: dict[str, float] = field(default_factory=dict)    # case id -> Case.floor (0: entry-wise errors)


def prepare_cases(case_ids, seed: int, folder: Path) -> Prepared:
    """Draw every case's inputs, write them to ``folder`` for the sandbox, compute the references."""
    from transformer_course_cases import hidden_case

    folder.mkdir(parents=True, exist_ok=True)
    manifest, expected, names, tol, dtypes, floor = {}, {}, {}, {}, {}, {}
    for case_id in case_ids:
        case = hidden_case(case_id, seed=seed)
        arrays: dict = {}
        encoded = _encode(case.inputs, arrays, "inputs")
        file = _safe(case_id) + ".npz"
        np.savez(folder / file, **arrays)
        manifest[case_id] = {"file": file, "inputs": encoded, "output_names": list(case.spec.output_names)}
        with np.errstate(all="ignore"):
            expected[case_id] = tuple(np.asarray(e) for e in case.expected())
        names[case_id] = tuple(case.spec.output_names)
        tol[case_id] = float(case.spec.tol)
        dtypes[case_id] = tuple(case.spec.dtype_of(i) for i in range(len(names[case_id])))
        floor[case_id] = float(case.spec.floor)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return Prepared(seed, expected, names, tol, dtypes, floor)


# --------------------------------------------------------------------------- comparison
@dataclass
class CaseResult:
    case_id: str
    passed: bool
    reason: str          # short, for the student: never the reference values or the inputs' generator


def _load_npz(data: bytes, names: tuple, expected: tuple) -> dict:
    """Arrays from an exported .npz, checked before anything is allocated.

    No pickles (object arrays are refused from the header), no member whose
    header announces more elements than the reference has (times two), and no
    more bytes read than the header announces: a forged header or a zip bomb
    fails here, cheaply.
    """
    from numpy.lib import format as npformat

    limit = {name: 2 * max(1, int(np.asarray(e).size)) for name, e in zip(names, expected)}
    budget = sum(limit.values()) * 16 + (1 << 16)
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        if len(infos) > len(names) + 2:
            raise ValueError("unexpected entries in the exported file")
        if sum(i.file_size for i in infos) > budget:
            raise ValueError("the exported arrays are much larger than expected")
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in limit:
                continue
            with zf.open(info) as fh:
                version = npformat.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = npformat.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, fortran, dtype = npformat.read_array_header_2_0(fh)
                else:
                    raise ValueError(f"unsupported .npy version {version}")
                if dtype.hasobject or dtype.kind not in "biuf":
                    raise ValueError(f"{name}: dtype {dtype} is not a plain number")
                count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                if count < 0 or count > limit[name]:
                    raise ValueError("the exported arrays are much larger than expected")
                nbytes = count * dtype.itemsize
                raw = fh.read(nbytes + 1)
                if len(raw) != nbytes:
                    raise ValueError(f"{name}: the data does not match its header")
            arr = np.frombuffer(raw, dtype=dtype, count=count)
            out[name] = arr.reshape(shape, order="F" if fortran else "C").copy()
    return out


def compare_case(case_id: str, prepared: Prepared, files: dict[str, bytes],
                 refused: dict[str, str] | None = None) -> CaseResult:
    names = prepared.output_names[case_id]
    expected = prepared.expected[case_id]
    tol = prepared.tolerance[case_id]
    data = files.get(_safe(case_id) + ".npz")
    if data is None and refused and _safe(case_id) + ".npz" in refused:
        return CaseResult(case_id, False, refused[_safe(case_id) + ".npz"])
    if data is None:
        err = files.get(_safe(case_id) + ".error.json")
        if err is not None:
            try:
                reason = str(json.loads(err.decode("utf-8"))["reason"])[:300]
            except Exception:  # noqa: BLE001
                reason = "the result could not be exported"
            return CaseResult(case_id, False, reason)
        return CaseResult(case_id, False, "no result: the hidden test did not get to check this case")
    try:
        arrays = _load_npz(data, names, expected)
    except Exception as exc:  # noqa: BLE001 -- anything unreadable fails the case
        return CaseResult(case_id, False, f"the exported result is unreadable ({type(exc).__name__}: "
                                          f"{str(exc)[:120]})")
    dtypes = prepared.dtypes.get(case_id) or (None,) * len(names)
    for name, ref, dtype in zip(names, expected, dtypes):
        got = arrays.get(name)
        if got is None:
            return CaseResult(case_id, False, f"{name}: missing from the result")
        reason = compare_array(name, got, np.asarray(ref), tol, dtype=dtype, floor=prepared.floor.get(case_id, 0.0))
        if reason:
            return CaseResult(case_id, False, reason)
    return CaseResult(case_id, True, "")


def compare_array(name: str, got: np.ndarray, ref: np.ndarray, tol: float, *, dtype=None, floor: float = 0.0) -> str:
    """'' when ``got`` matches ``ref``; otherwise a short reason.

    A plain number (float, integer; boolean where the reference is), of the dtype the case promises
    (``dtype``: a name, "integer", "floating" or None for any), of the reference's shape, NaN and
    infinities where the reference has them, and every other entry within ``tol`` in the measure of
    ``transformer_course_cases.relative_errors`` with the case's ``floor``: the same rules
    ``HiddenCase.check`` applies in a notebook's own process.
    """
    from transformer_course_cases import dtype_mismatch, scaled_mismatch

    allowed = "iuf" + ("b" if ref.dtype.kind == "b" else "")
    if got.dtype.kind not in allowed:
        return f"{name}: expected a float or integer array, got dtype {got.dtype}"
    reason = dtype_mismatch(got, dtype) or scaled_mismatch(got, ref, tol, floor)
    return f"{name}: {reason}" if reason else ""
