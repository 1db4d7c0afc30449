"""Reading and writing a safetensors file (Hugging Face's weight format): named arrays and string metadata.

Layout::

    header_size:u64 (little-endian)   header: header_size bytes of UTF-8 JSON   data: the arrays' bytes

The header maps each array's name to ``{"dtype": "F32", "shape": [out, in], "data_offsets": [begin, end]}``
(offsets into the data, which the arrays cover without gaps or overlaps, each stored C-contiguous and
little-endian) and may hold ``"__metadata__"``, a dict of strings. Writers pad the header with spaces to a
multiple of 8 bytes.

The ``safetensors`` package reads and writes the same files (tests/test_safetensors_file.py checks both
ways). The course reads them itself, as it reads GGUF (gguf_file.py): the grader's sandbox offers an
exercise NumPy and the standard library, not the libraries around them (exercise_rule.py), and notebook
07's model and notebook 11's adapters must load there as they do in a student's kernel.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# safetensors' dtype names -> NumPy's (little-endian). BF16 and the F8 kinds have no NumPy dtype.
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
          "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
MAX_HEADER = 100 << 20                    # safetensors refuses larger headers too


def _read_header(f, path) -> tuple[dict, int]:
    raw = f.read(8)
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header size)")
    (size,) = struct.unpack("<Q", raw)
    if size > MAX_HEADER:
        raise ValueError(f"{path}: header of {size:,} bytes; a safetensors header is at most {MAX_HEADER:,}")
    text = f.read(size)
    if len(text) < size:
        raise ValueError(f"{path}: the header is cut short ({len(text):,} of {size:,} bytes)")
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header must be a JSON object, got {type(header).__name__}")
    return header, 8 + size


def read_metadata(path) -> dict[str, str]:
    """The ``__metadata__`` strings of a safetensors file ({} when it has none)."""
    with open(path, "rb") as f:
        header, _ = _read_header(f, path)
    return dict(header.get("__metadata__") or {})


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every array of the safetensors file ``path``: name -> writable NumPy array (native byte order)."""
    with open(path, "rb") as f:
        header, start = _read_header(f, path)
        data = bytearray(f.seek(0, 2) - start)          # the arrays' bytes, read once into writable memory
        f.seek(start)
        f.readinto(data)
    out, spans = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        kind, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        if kind not in DTYPES:
            raise ValueError(f"{path}: {name} has dtype {kind}, which NumPy cannot hold "
                             f"(readable: {', '.join(DTYPES)})")
        dtype = np.dtype(DTYPES[kind])
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: {name} ({kind} {list(shape)}) has data offsets [{begin}, {end}], which do "
                             f"not fit its {count * dtype.itemsize:,} bytes in the {len(data):,} bytes of data")
        spans.append((begin, end, name))
        out[name] = np.frombuffer(data, dtype=dtype, count=count, offset=begin).reshape(shape).astype(
            dtype.newbyteorder("="), copy=False)
    spans.sort()
    covered = 0
    for begin, end, name in spans:
        if begin != covered:
            raise ValueError(f"{path}: the arrays must cover the data without gaps or overlaps; {name} starts at "
                             f"{begin}, the previous one ends at {covered}")
        covered = end
    if covered != len(data):
        raise ValueError(f"{path}: {len(data) - covered:,} bytes of data after the last array")
    return out


def write_safetensors(arrays: dict, path, metadata: dict | None = None) -> Path:
    """Write ``arrays`` (name -> NumPy array) and ``metadata`` (str -> str) as the safetensors file ``path``."""
    header: dict = {}
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata must map strings to strings, got {key!r}: {type(value).__name__}")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        little = a.dtype.newbyteorder("<")
        if little not in NAMES:
            raise TypeError(f"{name}: dtype {a.dtype} has no safetensors name (writable: "
                            f"{', '.join(str(d) for d in NAMES)})")
        kind = NAMES[little]
        blob = np.ascontiguousarray(a, dtype=little).tobytes()
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset = offset + len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text = text + b" " * (-len(text) % 8)                 # padded to 8 bytes, as safetensors writes it
    path = Path(path)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return path
