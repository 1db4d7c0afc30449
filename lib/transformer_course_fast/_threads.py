"""Threads that NumPy can use: OpenBLAS held at one thread, a persistent pool, reused buffers.

NumPy's ufuncs run on one core and OpenBLAS's own threads spin between calls, so the fast
path runs its own Python threads (``matmul`` and ufuncs release the GIL) while OpenBLAS is
held at one thread per product. threadpoolctl is not a dependency: the two OpenBLAS C
functions are looked up through ctypes in the library NumPy's wheel ships.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import glob
import os
import threading

import numpy as np

_BLAS_LOCK = threading.Lock()
_BLAS_STATE = {"api": None, "searched": False, "users": 0, "saved": None}


def _openblas_libraries():
    """The OpenBLAS libraries NumPy's wheel ships, opened with ctypes."""
    root = os.path.dirname(os.path.abspath(np.__file__))
    patterns = [os.path.join(root, os.pardir, "numpy.libs", "*openblas*"),
                os.path.join(root, ".dylibs", "*openblas*"),
                os.path.join(root, "_core", "*openblas*")]
    for path in sorted({p for pat in patterns for p in glob.glob(pat)}):
        try:
            yield ctypes.CDLL(path)
        except OSError:
            continue


def _openblas_api():
    """``(get_num_threads, set_num_threads)`` of NumPy's OpenBLAS, or None if not found."""
    if _BLAS_STATE["searched"]:
        return _BLAS_STATE["api"]
    _BLAS_STATE["searched"] = True
    names = [("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
             ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
             ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
             ("openblas_get_num_threads", "openblas_set_num_threads")]
    for lib in _openblas_libraries():
        for get_name, set_name in names:
            get_fn, set_fn = getattr(lib, get_name, None), getattr(lib, set_name, None)
            if get_fn is not None and set_fn is not None:
                get_fn.restype = ctypes.c_int
                set_fn.argtypes = [ctypes.c_int]
                set_fn.restype = None
                _BLAS_STATE["api"] = (get_fn, set_fn)
                return _BLAS_STATE["api"]
    return None


def openblas_corename() -> str | None:
    """The kernel OpenBLAS chose for this CPU (``"SkylakeX"``, ``"Haswell"``, ...; ``OPENBLAS_CORETYPE`` overrides
    it), or None if NumPy's OpenBLAS is not found."""
    for lib in _openblas_libraries():
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                     "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


def _blas_threads() -> int:
    """Threads OpenBLAS would use now (1 if it cannot be controlled)."""
    api = _openblas_api()
    if api is None:
        return 1
    with _BLAS_LOCK:
        if _BLAS_STATE["users"]:
            return int(_BLAS_STATE["saved"])
        return max(1, int(api[0]()))


@contextlib.contextmanager
def _single_threaded_blas():
    """Hold OpenBLAS at one thread; restore the previous count when the last user leaves."""
    api = _openblas_api()
    with _BLAS_LOCK:
        if _BLAS_STATE["users"] == 0:
            _BLAS_STATE["saved"] = int(api[0]())
            api[1](1)
        _BLAS_STATE["users"] += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_STATE["users"] -= 1
            if _BLAS_STATE["users"] == 0:
                api[1](_BLAS_STATE["saved"])


_POOL_LOCK = threading.Lock()
_POOL: dict = {"executor": None, "size": 0}


def _executor(n_workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """A persistent pool (starting threads on every call would cost ~0.1 ms)."""
    with _POOL_LOCK:
        if _POOL["size"] < n_workers:
            if _POOL["executor"] is not None:
                _POOL["executor"].shutdown(wait=False)
            _POOL["executor"] = concurrent.futures.ThreadPoolExecutor(
                max_workers=n_workers, thread_name_prefix="flash_attention")
            _POOL["size"] = n_workers
        return _POOL["executor"]


def _effective_threads(threads) -> int:
    """Threads to use: ``threads`` (default: OpenBLAS's count), or 1 if BLAS cannot be held
    at one thread (Python threads would then fight BLAS's own)."""
    if _openblas_api() is None:
        return 1
    return _blas_threads() if threads is None else threads


def _blas_pinned(threads: int):
    """While several Python threads work, OpenBLAS runs every product in the calling thread.
    Everything from validation to the last product runs inside, so OpenBLAS's own
    threads are never woken in between (they would spin and steal the cores)."""
    return _single_threaded_blas() if threads > 1 else contextlib.nullcontext()


def _parallel_drain(items, make_state, run, threads: int) -> None:
    """``run(state, item)`` for every item; ``threads`` threads (the caller is one of them)
    take the next item as they become free; each thread has its own ``make_state()``."""
    threads = min(threads, len(items))
    if threads <= 1:
        state = make_state()
        for item in items:
            run(state, item)
        return
    lock = threading.Lock()
    position = iter(range(len(items)))

    def drain():
        state = make_state()
        while True:
            with lock:
                k = next(position, None)
            if k is None:
                return
            run(state, items[k])

    futures = [_executor(threads - 1).submit(drain) for _ in range(threads - 1)]
    try:
        drain()
    finally:
        for f in futures:
            f.result()


def _linear(x, W, threads: int, auto: bool = True, scratch=None):
    """``x @ W`` for ``x`` ``(..., n, d_in)``, the product shared among the threads:
    by blocks of rows when there are many rows, else by blocks of columns of W (each
    thread then packs only its part of W -- with few rows, packing W is most of the work).
    ``scratch``: name of a reused buffer for the result (for intermediates; see :func:`_buffer`)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])                        # (rows, d_in); a view when possible
    m, n = x2.shape[0], W.shape[1]
    dtype = np.result_type(x2, W)
    out = (np.empty((m, n), dtype) if scratch is None
           else _buffer(scratch, m * n, dtype).reshape(m, n))   # (rows, d_out)
    if auto and m * n * x2.shape[1] < _MIN_MACS_PER_THREAD * threads:
        threads = 1
    by_rows = m >= 512 * threads
    if by_rows:
        step = -(-m // threads)
        blocks = [(slice(r0, r0 + step), slice(None)) for r0 in range(0, m, step)]
    else:
        step = -(-n // threads)
        step = -(-step // 64) * 64                         # a multiple of 64 columns
        blocks = [(slice(None), slice(c0, c0 + step)) for c0 in range(0, n, step)]

    def run(_, block):
        rows, cols = block
        np.matmul(x2[rows], W[:, cols], out=out[rows, cols])

    _parallel_drain(blocks, lambda: None, run, threads)
    return out.reshape(*lead, n)                           # (..., n, d_out)



# Below this many multiply-adds per thread, a product is not worth splitting.
_MIN_MACS_PER_THREAD = 1 << 22

_LOCAL = threading.local()   # per thread: the scratch buffers, reused across calls
_GENERATION = [0]            # bumped by release_buffers(); older buffers are dropped on next use


def _buffer(name: str, size: int, dtype) -> np.ndarray:
    """A flat scratch array of at least ``size`` elements, kept by this thread between calls.

    Fresh memory is expensive: the first touch of every 4 KiB page is a page
    fault (about 0.3 us per KiB on the benchmark machine), which costs more than
    the arithmetic on small inputs. So each thread allocates its tile buffers
    once and reuses them; :func:`release_buffers` lets them go.
    """
    if getattr(_LOCAL, "generation", None) != _GENERATION[0]:
        _LOCAL.buffers, _LOCAL.generation = {}, _GENERATION[0]
    key = (name, np.dtype(dtype).str)
    buf = _LOCAL.buffers.get(key)
    if buf is None or buf.size < size:
        buf = _LOCAL.buffers[key] = np.empty(size, dtype)
    return buf[:size]


def release_buffers() -> None:
    """Let go of the scratch buffers each thread keeps between calls of
    :func:`flash_attention` (about ``block_q * block_k`` scores per thread:
    1 MiB in float32 at the default tiles). They are freed by their thread's
    next call (or when the thread ends); the calling thread's at once."""
    _GENERATION[0] += 1
    _LOCAL.__dict__.clear()


