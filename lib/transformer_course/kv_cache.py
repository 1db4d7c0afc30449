"""The KV cache: the keys and values of the positions a decoder has seen (theory.md §6.2, notebooks 08, 09).

With the causal mask the keys and values of positions ``0..t`` never change when token ``t + 1`` is
appended, so a generating model keeps them and computes, for each new token, one query, one key and one
value per head. One protocol, for one attention layer::

    cache = cache.append(keys, values)   # keys, values (..., n_heads, n_new, d_head) after the old ones
    cache.keys, cache.values             # every position so far (..., n_heads, length, d_head)
    cache.length                         # how many positions that is
    cache = cache.truncate(n)            # forget positions n.. (speculative decoding's rollback)

(``append`` and ``truncate`` return the cache that holds the result: a new object or the same one, updated
in place; callers always use what they return.) Two implementations, interchangeable:

* :class:`GrowingKVCache`: immutable; each append concatenates (notebook 08: simple, memory grows with
  the text, every step copies the cache).
* :class:`PreallocatedKVCache`: one buffer of ``capacity`` positions filled in place (notebook 09, what
  llama.cpp does: no copy, the memory is reserved up front).

:class:`LayerCaches` holds one cache per layer of a model (all at the same length).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, describe, positive_int


def check_truncate(length, held: int) -> int:
    """``truncate``'s argument: an int in ``0..held`` (a cache forgets positions; it cannot invent them)."""
    if isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)):
        raise TypeError(f"length must be an int in 0..{held} (the positions to keep), got {describe(length)}")
    if not 0 <= length <= held:
        raise ValueError(f"length must be in 0..{held} (the positions this cache holds), got {length}")
    return int(length)


def _check_new(keys, values):
    keys = as_float_array(keys, "keys", min_ndim=3)
    values = as_float_array(values, "values", min_ndim=3)
    if values.shape != keys.shape:
        raise ValueError(f"keys and values must have one shape (..., n_heads, n_new, d_head), "
                         f"got keys {keys.shape} and values {values.shape}")
    return keys, values


class GrowingKVCache:
    """The keys and values of one attention layer, grown by concatenation (immutable).

    Attributes:
        keys, values: ``(..., n_heads, length, d_head)`` each.
    """

    def __init__(self, keys, values):
        self.keys = np.asarray(keys)
        self.values = np.asarray(values)

    def __iter__(self):                                    # keys, values = cache
        return iter((self.keys, self.values))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_past={self.length}, keys {self.keys.shape}, values {self.values.shape})"

    @property
    def length(self) -> int:
        """Number of cached positions ``n_past``."""
        return self.keys.shape[-2]

    @property
    def nbytes(self) -> int:
        """Memory held: ``2 * (...) * n_heads * n_past * d_head * itemsize`` bytes."""
        return self.keys.nbytes + self.values.nbytes

    def append(self, keys, values) -> "GrowingKVCache":
        """A new cache with ``keys``/``values`` ``(..., n_heads, n_new, d_head)`` appended after the old ones."""
        return type(self)(np.concatenate([self.keys, keys], axis=-2),      # (..., h, n_past + n_new, d_head)
                          np.concatenate([self.values, values], axis=-2))

    def truncate(self, length: int) -> "GrowingKVCache":
        """A new cache holding positions ``0..length-1`` only."""
        length = check_truncate(length, self.length)
        return type(self)(self.keys[..., :length, :], self.values[..., :length, :])


class PreallocatedKVCache:
    """The keys and values of one attention layer in buffers of ``capacity`` positions, filled in place.

    Args:
        n_heads: key/value heads (``n_kv_heads`` in grouped-query attention).
        capacity: the most positions it can hold.
        d_head: width of a key.
        dtype: the buffers' dtype (a model's float32 or float64).

    Attributes:
        keys, values: the filled part, ``(n_heads, length, d_head)`` views of the buffers.
        capacity, length.
    """

    def __init__(self, n_heads: int, capacity: int, d_head: int, dtype=np.float32):
        shape = (positive_int(n_heads, "n_heads"), positive_int(capacity, "capacity"), positive_int(d_head, "d_head"))
        self._keys = np.zeros(shape, dtype=dtype)                          # (h, capacity, d_head)
        self._values = np.zeros(shape, dtype=dtype)
        self.capacity = shape[1]
        self.length = 0

    @classmethod
    def on_buffers(cls, keys: np.ndarray, values: np.ndarray) -> "PreallocatedKVCache":
        """A cache filling the given ``(n_heads, capacity, d_head)`` arrays (e.g. one layer's slice of a
        model's buffers), empty to start with."""
        if keys.ndim != 3 or values.shape != keys.shape or values.dtype != keys.dtype:
            raise ValueError(f"keys and values must be buffers of one shape (n_heads, capacity, d_head) and dtype, "
                             f"got {describe(keys)} and {describe(values)}")
        cache = cls.__new__(cls)
        cache._keys, cache._values = keys, values
        cache.capacity, cache.length = keys.shape[1], 0
        return cache

    def __repr__(self) -> str:
        return f"PreallocatedKVCache(n_past={self.length} of {self.capacity}, buffers {self._keys.shape})"

    @property
    def keys(self) -> np.ndarray:
        return self._keys[:, :self.length]                                 # (h, length, d_head)

    @property
    def values(self) -> np.ndarray:
        return self._values[:, :self.length]

    @property
    def nbytes(self) -> int:
        """Memory reserved: ``2 * n_heads * capacity * d_head * itemsize`` bytes, filled or not."""
        return self._keys.nbytes + self._values.nbytes

    def append(self, keys, values) -> "PreallocatedKVCache":
        """Write ``keys``/``values`` ``(n_heads, n_new, d_head)`` at positions ``length..``; returns itself."""
        keys, values = _check_new(keys, values)
        h, _, d = self._keys.shape
        if keys.ndim != 3 or keys.shape[0] != h or keys.shape[2] != d:
            raise ValueError(f"keys must have shape ({h}, n_new, {d}) for this cache, got {describe(keys)}")
        if keys.dtype != self._keys.dtype:
            raise TypeError(f"keys must be {self._keys.dtype} like this cache's buffers (no silent cast), got {keys.dtype}")
        start, n = self.length, keys.shape[1]
        if start + n > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; {start} used, {n} more requested")
        self._keys[:, start:start + n] = keys
        self._values[:, start:start + n] = values
        self.length = start + n
        return self

    def truncate(self, length: int) -> "PreallocatedKVCache":
        """Keep positions ``0..length-1``; the next append writes at ``length``. Returns itself."""
        self.length = check_truncate(length, self.length)
        return self


class LayerCaches:
    """One cache per layer of a model, all holding the same positions.

    ``caches[L]`` is layer L's cache; ``caches.append(L, keys, values)`` appends to it and returns its
    keys and values for every position so far (a layer that appends by itself stores the result with
    ``caches[L] = ...``). Build with :meth:`growing` or :meth:`preallocated`; a model's ``new_cache(capacity)``
    builds the one that fits it, and its ``forward(ids, cache)`` extends it in place.
    """

    def __init__(self, layers):
        self.layers = list(layers)

    @classmethod
    def growing(cls, n_layers: int, n_heads: int, d_head: int, dtype=np.float32) -> "LayerCaches":
        empty = np.zeros((n_heads, 0, d_head), dtype=dtype)
        return cls(GrowingKVCache(empty, empty) for _ in range(positive_int(n_layers, "n_layers")))

    @classmethod
    def preallocated(cls, n_layers: int, n_heads: int, capacity: int, d_head: int, dtype=np.float32) -> "LayerCaches":
        return cls(PreallocatedKVCache(n_heads, capacity, d_head, dtype)
                   for _ in range(positive_int(n_layers, "n_layers")))

    def __getitem__(self, layer):
        return self.layers[layer]

    def __setitem__(self, layer: int, cache) -> None:
        """Make ``cache`` layer ``layer``'s cache: what its ``append`` returned (a block that appends itself)."""
        self.layers[layer] = cache

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def __repr__(self) -> str:
        return f"LayerCaches({len(self.layers)} x {self.layers[0]!r})"

    @property
    def length(self) -> int:
        """Positions every layer holds (between two forward passes, each layer's length)."""
        return min(c.length for c in self.layers)

    @length.setter
    def length(self, n: int) -> None:
        """Forget (or, preallocated, mark as filled) all positions from ``n`` on, in every layer."""
        for i, c in enumerate(self.layers):
            if isinstance(c, PreallocatedKVCache):
                if not 0 <= n <= c.capacity:
                    raise ValueError(f"length must be in 0..{c.capacity}, got {n}")
                c.length = n
            else:
                self.layers[i] = type(c)(c.keys[..., :n, :], c.values[..., :n, :])

    def truncate(self, length: int) -> "LayerCaches":
        """Forget every position from ``length`` on, in every layer (``length`` <= the positions held): what
        speculative decoding does after a rejected draft. Returns itself, changed in place."""
        length = check_truncate(length, self.length)
        self.layers = [c.truncate(length) for c in self.layers]
        return self

    @property
    def capacity(self) -> int | None:
        """The most positions the caches hold, or None when they grow."""
        caps = [getattr(c, "capacity", None) for c in self.layers]
        return None if None in caps else min(caps)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.layers)

    def append(self, layer: int, keys, values) -> tuple[np.ndarray, np.ndarray]:
        """Append layer ``layer``'s new ``keys``/``values`` and return its keys and values of every position."""
        self.layers[layer] = self.layers[layer].append(keys, values)
        return self.layers[layer].keys, self.layers[layer].values


def check_model_cache(cache, n_layers: int, n_new: int) -> int:
    """A model's ``forward(ids, cache)`` argument checked: None, or a :class:`LayerCaches` of ``n_layers`` caches
    with room for ``n_new`` more positions. Returns the number of positions it holds (0 for None)."""
    if cache is None:
        return 0
    if not isinstance(cache, LayerCaches):
        raise TypeError(f"cache must be None or a LayerCaches (the model's new_cache()), got {describe(cache)}")
    if len(cache) != n_layers:
        raise ValueError(f"cache holds {len(cache)} layers, the model has {n_layers}")
    start = cache.length
    if cache.capacity is not None and start + n_new > cache.capacity:
        raise ValueError(f"the cache holds {cache.capacity} positions; {start} used, {n_new} more requested")
    return start

