"""Reading a GGUF file (llama.cpp's model format, version 3): metadata and raw tensors (notebook 09).

Layout, all little-endian::

    "GGUF"  version:u32  n_tensors:u64  n_metadata:u64
    n_metadata x  key:string  type:u32  value            (string = length:u64 + UTF-8 bytes)
    n_tensors  x  name:string  n_dims:u32  dims:u64 x n_dims  kind:u32  offset:u64
    padding to `general.alignment` (default 32), then the tensor data; each tensor's bytes start at
    data_start + offset.

A value is a scalar (u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64), a string, or an array
(element type:u32, count:u64, elements). ``dims`` lists the fastest-varying axis first: a
matrix used as ``y = W x`` with W (out, in) is stored as dims ``[in, out]``, row by row.

The ``gguf`` package of the llama.cpp project reads the same files (tests/test_smollm2.py checks
that both agree); this reader exists because the course wants to show the format, and because it
turns the 98,000 strings of a tokenizer into Python strings about 30x faster.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
# value types: struct format of the scalars; 8 = string, 9 = array
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
NUMPY_OF = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
            11: "<i8", 12: "<f8"}
# tensor kinds: name, numbers per block, bytes per block
KINDS = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34)}


@dataclass
class GGUFContents:
    """What a GGUF file holds.

    ``metadata``: key -> value (int, float, bool, str, or a list; numeric arrays as lists).
    ``raw``: tensor name -> NumPy array over the file's bytes (memory-mapped, read-only): float32
    ``(rows, columns)`` for F32, uint8 ``(rows, bytes per row)`` for quantised kinds; rows are the
    output features of a matrix.
    ``kinds``: tensor name -> "F32", "Q8_0", "Q4_1", ...; ``shapes``: name -> (rows, columns) or (n,).
    """

    metadata: dict
    raw: dict
    kinds: dict
    shapes: dict
    path: Path


class _Cursor:
    """Reads consecutive little-endian values from a bytes-like buffer."""

    def __init__(self, buffer):
        self.buffer, self.pos = buffer, 0

    def scalar(self, fmt):
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos = self.pos + struct.calcsize(fmt)
        return value

    def string(self):
        n = self.scalar("<Q")
        text = bytes(self.buffer[self.pos:self.pos + n]).decode("utf-8")
        self.pos = self.pos + n
        return text

    def value(self, kind):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            element, count = self.scalar("<I"), self.scalar("<Q")
            if element == STRING:
                return [self.string() for _ in range(count)]
            if element in NUMPY_OF:                                    # numbers: one read
                out = np.frombuffer(self.buffer, NUMPY_OF[element], count, self.pos)
                self.pos = self.pos + out.nbytes
                return out.tolist()
            return [self.value(element) for _ in range(count)]
        if kind not in SCALARS:
            raise ValueError(f"unknown GGUF value type {kind} at byte {self.pos}")
        return self.scalar(SCALARS[kind])


def read_gguf(path) -> GGUFContents:
    """Parse a GGUF file (version 2 or 3): every metadata value, and every tensor as raw bytes."""
    path = Path(path)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    cursor = _Cursor(data)
    if bytes(data[:4]) != MAGIC:
        raise ValueError(f"{path} is not a GGUF file (it starts with {bytes(data[:4])!r}, not {MAGIC!r})")
    cursor.pos = 4
    version = cursor.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_metadata = cursor.scalar("<Q"), cursor.scalar("<Q")

    metadata = {}
    for _ in range(n_metadata):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("<I"))

    infos = []
    for _ in range(n_tensors):
        name = cursor.string()
        dims = [cursor.scalar("<Q") for _ in range(cursor.scalar("<I"))]
        kind, offset = cursor.scalar("<I"), cursor.scalar("<Q")
        if kind not in KINDS:
            raise ValueError(f"{path}: tensor {name!r} has kind {kind}, not one of {sorted(KINDS)}")
        infos.append((name, dims, kind, offset))

    alignment = int(metadata.get("general.alignment", 32))
    data_start = -(-cursor.pos // alignment) * alignment             # round up to the alignment
    raw, kinds, shapes = {}, {}, {}
    for name, dims, kind, offset in infos:
        kind_name, per_block, block_bytes = KINDS[kind]
        columns, rows = dims[0], int(np.prod(dims[1:], dtype=np.int64))
        row_bytes = columns // per_block * block_bytes
        start = data_start + offset
        block = data[start:start + rows * row_bytes]                 # (rows * row_bytes,) uint8, no copy
        if kind_name == "F32":
            array = block.view("<f4")
        elif kind_name == "F16":
            array = block.view("<f2")
        else:
            array = block
        shape = (columns,) if len(dims) == 1 else (rows, columns)
        raw[name] = array.reshape(shape if kind_name in ("F32", "F16") else (*shape[:-1], row_bytes))
        kinds[name], shapes[name] = kind_name, shape
    return GGUFContents(metadata, raw, kinds, shapes, path)
