"""Byte-level BPE, the tokenizer of GPT-2 and SmolLM2, from first principles (notebook 12).

Text becomes ids in four steps, one function each, and comes back in two::

    pretokenize(text, split)      text -> pieces ("Hello", " world", "!")       the split: GPT-2's expression
    utf8_bytes(piece)             piece -> its UTF-8 bytes, ints 0..255
    bpe_encode(ids, merges)       bytes -> ids: merge the lowest-ranked adjacent pair, again and again
    ByteLevelBPE.id_map           the course's ids -> the model's ids (a relabelling, below)
    ---
    token_bytes(merges)[id]       an id -> its bytes;  b"".join(...).decode("utf-8") -> text

and :func:`train_bpe` learns the merges from a text: count adjacent pairs, merge the most frequent,
repeat.

**Ids.** The course numbers tokens as minbpe does: 0..255 are the 256 bytes, and merge ``r`` (its
*rank*: the order in which it was learned) makes the new id ``256 + r`` from the pair ``merges[r] =
(a, b)``, both older ids. A real model numbers its tokens its own way; :class:`ByteLevelBPE` holds the
relabelling ``id_map`` (course id -> model id). SmolLM2's file has 17 control tokens first (ids 0..16),
then one token per byte (235 of the 256: 21 bytes have none), then merge ``r`` as id ``252 + r``.

**The split.** Merges never cross the pieces of the pre-tokenizing split, so a token never spans two
words, or a word and its punctuation. GPT-2's expression (:data:`GPT2_PATTERN`) keeps a leading space
with the word after it, and makes runs of letters, of numbers, of other symbols and of whitespace
pieces of their own. SmolLM2's file says ``tokenizer.ggml.pre = "smollm"``: every number character
(Unicode class N) is first a piece of its own, then GPT-2's expression splits the rest -- llama.cpp's
``LLAMA_VOCAB_PRE_TYPE_SMOLLM`` (the expressions ``\\p{N}``, then GPT-2's) and the model's Hugging Face
``tokenizer.json`` (``Digits(individual_digits=True)``, then ``ByteLevel``) both say so. ``\\p{L}``
(letters) and ``\\p{N}`` need the ``regex`` package (the standard library's ``re`` has no Unicode
classes); it is imported when a split is first made, so the rest of this module works without it. The
one rule lets an exercise use it (exercise_rule.py): the grader's sandbox holds it.

**Bytes with no token.** A byte-level vocabulary holds the 256 bytes, so any text can be spelled --
unless the vocabulary left some out: SmolLM2's has no token for 21 bytes (:func:`missing_bytes`).
Its own tokenizers drop such bytes silently (Hugging Face's before merging, llama.cpp's after);
:meth:`ByteLevelBPE.encode` refuses them by default, naming the character, and drops them as
Hugging Face's does with ``unknown_bytes="drop"``.

Quick use::

    from transformer_course import smollm2
    tok = smollm2.load_tokenizer(smollm2.read_gguf().metadata)   # a ByteLevelBPE
    tok.encode("The capital of France is")      # array([504, 3575, 282, 4649, 314])
    tok.decode([4649])                          # ' France'
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import Counter

import numpy as np

from ._checks import describe

# GPT-2's pre-tokenizing split (OpenAI's encoder.py; Hugging Face's ByteLevel pre-tokenizer):
# contractions, then an optional space and a run of letters, of numbers, or of other symbols, then
# whitespace -- a whitespace run gives its last space to the word after it ("a  b" -> "a", " ", " b").
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# SmolLM2's rule ("smollm"): every number character a piece of its own, before GPT-2's expression.
DIGIT_PATTERN = r"\p{N}"
SPLITS = ("gpt2", "smollm")

# Letters and numbers that the `regex` package (pinned in requirements/lock.txt) knows but the reference
# tokenizers' regular-expression engine (Oniguruma inside `tokenizers` 0.23) does not yet: characters of the
# newest Unicode version. Measured over all 1,114,112 code points (tests/test_bpe.py re-measures the
# candidates): 17,144 letters and 336 numbers, all unassigned in Python 3.11's unicodedata (Unicode 14.0).
# The course's classes leave them out, so that the split is the reference's for every code point.
_NEWER_LETTERS = (
    "\u0558\u058b-\u058c\u088f\u0c5c\u0cdc\u208f\u209d-\u209f\ua7ce-\ua7cf\ua7d2\ua7d4\ua7dd\ua7e2\ua7f1"
    "\uab6c-\uab6d\U000107bb-\U000107bf\U00010940-\U00010959\U00010ec5-\U00010ec7\U00010ed9-\U00010eee"
    "\U00011b0a\U00011db0-\U00011ddb\U00011df1\U00016ea0-\U00016eb8\U00016ebb-\U00016ed3\U00016ff2-\U00016ff3"
    "\U000187f8-\U000187ff\U00018cd6-\U00018cda\U00018d09-\U00018d20\U00018d80-\U00018df2\U00018e00-\U00019191"
    "\U000191a0-\U000191d2\U0001b123-\U0001b128\U0001b168\U0001d6a6\U0001df1f-\U0001df24\U0001df2b-\U0001df81"
    "\U0001df90-\U0001df96\U0001dfcd-\U0001dfff\U0001e6c0-\U0001e6de\U0001e6e0-\U0001e6e2\U0001e6e4-\U0001e6e5"
    "\U0001e6e7-\U0001e6ed\U0001e6f0-\U0001e6f4\U0001e6fe-\U0001e6ff\U0002b73a-\U0002b73f\U0002b81e"
    "\U0002cea2-\U0002cead\U000323b0-\U00033479\U0003d000-\U0003fc3f")
_NEWER_NUMBERS = "\U00011de0-\U00011de9\U0001246f\U00012475-\U0001247f\U00012550-\U00012686\U00016ff4-\U00016ff6"
# The digit rule of SmolLM2's tokenizer.json is Rust's char::is_numeric, which knows 13 of those numbers
# (U+11DE0..U+11DE9, U+16FF4..U+16FF6) already: its class leaves out only the others.
_NEWER_NUMBERS_RUST = "\U0001246f\U00012475-\U0001247f\U00012550-\U00012686"


# =============================================================================
# 1. Bytes
# =============================================================================
def utf8_bytes(text) -> list[int]:
    """The UTF-8 bytes of ``text`` (a str) as ints 0..255: 1 byte for ASCII, 2 for U+0080..U+07FF, 3 up
    to U+FFFF, 4 above. A lone surrogate (U+D800..U+DFFF, which no UTF-8 text holds) is refused."""
    check_text(text)
    return list(text.encode("utf-8"))


def check_text(text, name: str = "text") -> str:
    """``text`` itself if it is a str that UTF-8 can encode. Bytes are refused (decode them yourself:
    which decoding, and what to do with invalid sequences, is your choice, not a silent default); the
    message says where they are not valid UTF-8. Anything else is a TypeError naming the argument."""
    if isinstance(text, (bytes, bytearray)):
        try:
            bytes(text).decode("utf-8")
            why = "decode it first: text.decode('utf-8')"
        except UnicodeDecodeError as exc:
            why = (f"and they are not valid UTF-8 either: byte 0x{text[exc.start]:02x} at offset {exc.start} "
                   f"({exc.reason})")
        raise TypeError(f"{name} must be a string, got bytes {bytes(text[:40])!r}; {why}")
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string, got {describe(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name}[{exc.start}] is a lone surrogate U+{ord(text[exc.start]):04X}: it has no UTF-8 "
                         "encoding, so no token spells it") from None
    return text


@functools.lru_cache(maxsize=None)
def byte_symbols() -> dict[int, str]:
    """GPT-2's byte -> character table: the 188 printable bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``)
    stand for themselves, the other 68 (controls, the space, ...) for U+0100, U+0101, ... in byte order,
    so the space 0x20 is ``Ġ`` (U+0120) and the newline 0x0A is ``Ċ``. A vocabulary file stores every
    token as such a string: printable, and without spaces that would clash with its ``"a b"`` merges."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(0x100 + i) for i, b in enumerate(others)}}


def symbols_to_bytes(symbols: str) -> bytes:
    """A token string of a vocabulary file (``"Ġworld"``) -> its bytes (``b" world"``)."""
    inverse = _symbol_byte()
    try:
        return bytes(inverse[c] for c in symbols)
    except KeyError as exc:
        raise ValueError(f"{symbols!r} is not a byte-level token string: {exc.args[0]!r} stands for no byte") from None


@functools.lru_cache(maxsize=None)
def _symbol_byte() -> dict[str, int]:
    return {s: b for b, s in byte_symbols().items()}


def missing_bytes(tokens) -> bytes:
    """The bytes whose symbol (:func:`byte_symbols`) is not a token of ``tokens``: no id sequence
    spells them. SmolLM2 lacks 21: 0x04 0x06 0x13 0x14 0x16 0x1d (control characters), 0xf1 0xf2
    (the first byte of U+40000..U+BFFFF), and 0xc0 0xc1 0xf5..0xff (never in UTF-8)."""
    vocab = set(tokens)
    return bytes(sorted(b for b, symbol in byte_symbols().items() if symbol not in vocab))


# =============================================================================
# 2. The split
# =============================================================================
@functools.lru_cache(maxsize=None)
def _compiled(pattern: str, newer_numbers: str = _NEWER_NUMBERS):
    try:
        import regex
    except ImportError:
        raise ImportError("the pre-tokenizing split needs the `regex` package (Unicode classes \\p{L}, \\p{N}): "
                          "pip install regex (requirements/lock.txt pins it)") from None
    # \p{L} and \p{N} as the reference engine knows them (see _NEWER_LETTERS): set difference, regex's V1.
    pattern = (pattern.replace(r"\p{L}", rf"[\p{{L}}--[{_NEWER_LETTERS}]]")
                      .replace(r"\p{N}", rf"[\p{{N}}--[{newer_numbers}]]"))
    return regex.compile(pattern, flags=regex.V1)


def pretokenize(text, split: str = "gpt2") -> list[str]:
    """The pieces of ``text`` that BPE merges within, never across.

    text:  str.
    split: "gpt2" (GPT-2's expression, :data:`GPT2_PATTERN`) or "smollm" (every number character a
           piece of its own first, then GPT-2's expression on the text between).
    returns: list of str; joined, they give ``text`` back.
    """
    text = check_text(text)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {describe(split)}")
    gpt2 = _compiled(GPT2_PATTERN)
    if split == "gpt2":
        return gpt2.findall(text)
    pieces = []
    for i, part in enumerate(_compiled(f"({DIGIT_PATTERN})", _NEWER_NUMBERS_RUST).split(text)):  # odd: a number char
        if i % 2:
            pieces.append(part)
        elif part:
            pieces.extend(gpt2.findall(part))
    return pieces


# =============================================================================
# 3. Training: learn merges from a text
# =============================================================================
def pair_counts(words: dict) -> Counter:
    """How often each adjacent pair occurs: ``words`` maps a tuple of ids to how many times it occurs.
    Overlapping pairs count: (a, a, a) holds (a, a) twice."""
    counts = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] = counts[pair] + n
    return counts


def merge_pair(ids, pair, new_id) -> list:
    """``ids`` with every occurrence of ``pair`` replaced by ``new_id``, left to right:
    merging (a, a) in (a, a, a) gives (new, a)."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(chunks, n_merges):
    """Learn ``n_merges`` merges from ``chunks``, the bytes of a text's pieces (:func:`pretokenize`).

    chunks:   list of sequences of ints 0..255 (one per piece of the text; a piece may repeat).
    n_merges: int >= 0.
    returns:  int64 array (m, 2), m = n_merges unless the chunks run out of pairs first (then fewer):
              row r is the pair (a, b) that merge r joins into the new id 256 + r.

    Each round counts the adjacent pairs inside every chunk (never across two chunks; overlapping
    pairs count, so (a, a, a) holds (a, a) twice), takes the most frequent -- of pairs equally
    frequent, the smallest (a, b), first a then b -- and replaces it everywhere, left to right.
    """
    words = Counter(_check_chunks(chunks))                 # (ids...) -> how often the piece occurs
    n_merges = _check_count(n_merges, "n_merges")
    merges = []
    for r in range(n_merges):
        counts = pair_counts(words)
        if not counts:
            break
        best = max(counts, key=lambda pair: (counts[pair], -pair[0], -pair[1]))
        merges.append(best)
        words = Counter({tuple(merge_pair(word, best, 256 + r)): n for word, n in words.items()})
    return np.array(merges, dtype=np.int64).reshape(-1, 2)


def merges_problem(chunks, merges, n_merges) -> str | None:
    """The first way ``merges`` breaks the training rule of :func:`train_bpe` on ``chunks`` (``n_merges`` asked),
    said in words, or None when it follows the rule. The pieces are rebuilt merge by merge and the pairs
    recounted before each one: it must be the most frequent pair at that point (of equal ones the smallest),
    and the list may stop short of ``n_merges`` only when no piece holds two ids. For tests (notebook 12)."""
    words = Counter(_check_chunks(chunks))                 # (ids...) -> how often the piece occurs
    n_merges = _check_count(n_merges, "n_merges")
    arr = np.asarray(merges)
    arr = arr.reshape(0, 2) if arr.size == 0 else arr
    if arr.ndim != 2 or arr.shape[1] != 2:
        return f"merges: expected an array of shape (m, 2), got shape {arr.shape}"
    pairs = [tuple(int(v) for v in row) for row in arr.reshape(-1, 2)]
    if len(pairs) > n_merges:
        return f"{len(pairs)} merges, but only {n_merges} were asked for"
    for r, pair in enumerate(pairs):
        counts = pair_counts(words)
        if pair not in counts:
            return f"merge {r} joins {pair}, a pair that no piece holds at that point"
        top = max(counts.values())
        want = min(p for p, n in counts.items() if n == top)
        if pair != want:
            return (f"merge {r}: expected {want} (occurs {top} times), got {pair} (occurs {counts[pair]} times)"
                    + ("; ties go to the smallest pair" if counts[pair] == top else ""))
        words = Counter({tuple(merge_pair(word, pair, 256 + r)): n for word, n in words.items()})
    left = next((word for word in words if len(word) > 1), None)
    if left is not None and len(pairs) < n_merges:
        return f"stopped after {len(pairs)} merges, but a piece still holds two ids: {list(left)}"
    return None


def _check_chunks(chunks) -> list[tuple]:
    if isinstance(chunks, (str, bytes)) or not hasattr(chunks, "__iter__"):
        raise TypeError(f"chunks must be a list of byte sequences (lists of ints 0..255), got {describe(chunks)}")
    out = []
    for i, chunk in enumerate(chunks):
        if isinstance(chunk, str):
            raise TypeError(f"chunks[{i}] must be a sequence of ints 0..255 (the piece's UTF-8 bytes), got the str "
                            f"{chunk[:40]!r}: use utf8_bytes(piece)")
        arr = np.asarray(list(chunk) if isinstance(chunk, (bytes, bytearray)) else chunk)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError(f"chunks[{i}] must be a 1-D sequence of ints 0..255, got {describe(chunk)}")
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"chunks[{i}] must hold bytes 0..255, got {int(arr[(arr < 0) | (arr > 255)][0])}")
        out.append(tuple(int(b) for b in arr))
    return out


def _check_count(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {describe(n)}")
    return int(n)


# =============================================================================
# 4. Encoding: apply the merges, lowest rank first
# =============================================================================
def merge_ranks(merges) -> dict:
    """``{(a, b): r}`` for the (n, 2) merges, checked: merge r may only join ids that exist before it
    (0..255 and 256..255 + r), and no pair is merged twice."""
    if isinstance(merges, dict):
        return merges
    arr = np.asarray(merges)
    if arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"merges must be an (n, 2) array of integer ids, got {describe(merges)}")
    limit = 256 + np.arange(len(arr))                                   # merge r may use ids < 256 + r
    bad = np.flatnonzero((arr < 0).any(axis=1) | (arr >= limit[:, None]).any(axis=1))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"merges[{r}] = {arr[r].tolist()} joins an id that does not exist before merge {r} "
                         f"(ids 0..{255 + r}): the merges do not match a byte-level vocabulary")
    ranks = {}
    for r, (a, b) in enumerate(arr.tolist()):
        if (a, b) in ranks:
            raise ValueError(f"merges[{r}] = {[a, b]} repeats merges[{ranks[(a, b)]}]: each pair is merged once")
        ranks[(a, b)] = r
    return ranks


def bpe_encode(ids, merges):
    """Apply the merges to one piece's ids, always the lowest-ranked pair first.

    ids:     sequence of ints (a piece's UTF-8 bytes, 0..255; any id below 256 + n_merges works).
    merges:  int (n_merges, 2): merge r joins the pair merges[r] into the id 256 + r (its rank is r);
             or the dict {(a, b): r} of :func:`merge_ranks`.
    returns: int64 array (m,), m <= len(ids): find the adjacent pair with the lowest rank, merge it
             (of equal pairs, the leftmost first), repeat until no adjacent pair has a rank.
    """
    ranks = merge_ranks(merges)
    ids = _check_ids(ids, 256 + len(ranks))
    if len(ids) > 64:                        # long pieces (a page of one letter): a heap, O(m log m)
        return np.array(_merge_long(ids, ranks), dtype=np.int64)
    while len(ids) >= 2:
        rank, i = min((ranks.get(pair, _NO_RANK), i) for i, pair in enumerate(zip(ids, ids[1:])))
        if rank == _NO_RANK:
            break
        ids = merge_pair(ids, (ids[i], ids[i + 1]), 256 + rank)
    return np.array(ids, dtype=np.int64)


_NO_RANK = float("inf")


def _merge_long(ids: list, ranks: dict) -> list:
    """:func:`bpe_encode`'s loop with a heap of (rank, position) over a linked list of symbols, for
    long pieces: each merge costs O(log m) instead of a pass over the piece. Same result: the heap
    pops the lowest rank, of equal ranks the leftmost, and skips entries a merge made stale."""
    n = len(ids)
    sym = list(ids)                                   # sym[i]: the id starting at position i (or None: merged away)
    nxt, prv = list(range(1, n + 1)), list(range(-1, n - 1))
    heap = [(ranks[p], i, p) for i, p in enumerate(zip(ids, ids[1:])) if p in ranks]
    heapq.heapify(heap)
    while heap:
        rank, i, pair = heapq.heappop(heap)
        j = nxt[i] if sym[i] is not None else n
        if j >= n or (sym[i], sym[j]) != pair:        # stale: one side was merged since
            continue
        sym[i], sym[j] = 256 + rank, None
        nxt[i] = nxt[j]
        if nxt[i] < n:
            prv[nxt[i]] = i
        for left, right in ((prv[i], i), (i, nxt[i])):
            if left >= 0 and right < n and (sym[left], sym[right]) in ranks:
                heapq.heappush(heap, (ranks[(sym[left], sym[right])], left, (sym[left], sym[right])))
    return [s for s in sym if s is not None]


def _check_ids(ids, n_ids: int) -> list:
    if isinstance(ids, str):
        raise TypeError(f"ids must be a sequence of integer ids, got {describe(ids)}")
    arr = np.asarray(list(ids) if isinstance(ids, (bytes, bytearray)) else ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"ids must be a 1-D sequence of integer ids, got {describe(ids)}")
    if arr.size and (arr.min() < 0 or arr.max() >= n_ids):
        bad = int(np.flatnonzero((arr < 0) | (arr >= n_ids))[0])
        raise ValueError(f"ids[{bad}] = {int(arr[bad])} is not an id of these merges (0..{n_ids - 1})")
    return arr.tolist()


# =============================================================================
# 5. Decoding: ids -> bytes -> text
# =============================================================================
def token_bytes(merges) -> list[bytes]:
    """The bytes of every id: ``table[b] = bytes([b])`` for the 256 bytes, and merge r's id 256 + r
    spells its two parts one after the other."""
    ranks = merge_ranks(merges)
    table = [bytes([b]) for b in range(256)]
    for (a, b), r in sorted(ranks.items(), key=lambda item: item[1]):
        table.append(table[a] + table[b])
    return table


def bpe_decode(ids, merges) -> str:
    """The text of course ids: their bytes, joined, read as UTF-8. Bytes that are not valid UTF-8 (ids
    cut from the middle of a character) become U+FFFD, one per invalid sequence, as the model's own
    decoders do (Python's and Rust's UTF-8 decoders replace the same maximal invalid parts)."""
    table = token_bytes(merges)
    ids = _check_ids(ids, len(table))
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


# =============================================================================
# 6. The shortest spelling: fewer tokens than BPE's, which the model never saw
# =============================================================================
def shortest_tokenization(data, tokens):
    """The fewest tokens whose bytes, joined, are ``data`` exactly.

    data:    sequence of ints 0..255 (the bytes to spell).
    tokens:  list of byte sequences (lists of ints 0..255, or bytes): the vocabulary, a token's id is
             its index. Every single byte that occurs in data is a token.
    returns: int64 array of token ids, one of the shortest spellings (several may tie).

    Dynamic programming over the prefixes: the best spelling of ``data[:j]`` ends with some token t
    that is a suffix of it, after the best spelling of ``data[:j - len(t)]``; so
    ``best[j] = 1 + min(best[j - len(t)])`` over those t, with ``best[0] = 0``. O(len(data) x the
    longest token) dictionary lookups.
    """
    data = bytes(_check_ids(data, 256))
    index, longest = _token_index(tokens)
    n = len(data)
    best = [0] + [None] * n                 # best[j]: fewest tokens spelling data[:j]
    last = [None] * (n + 1)                 # last[j]: the id that ends that spelling
    for j in range(1, n + 1):
        for length in range(1, min(longest, j) + 1):
            t = index.get(data[j - length:j])
            if t is not None and best[j - length] is not None and (best[j] is None or best[j - length] + 1 < best[j]):
                best[j], last[j] = best[j - length] + 1, t
        if best[j] is None:
            raise ValueError(f"data[{j - 1}] = {data[j - 1]} (0x{data[j - 1]:02x}) is no token: no spelling of data exists")
    ids, j = [], n
    while j > 0:                            # walk back along the last tokens
        ids.append(last[j])
        j = j - len(_token_at(tokens, last[j]))
    return np.array(ids[::-1], dtype=np.int64)


def _token_index(tokens) -> tuple[dict, int]:
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a list of byte sequences, got {describe(tokens)}")
    index, longest = {}, 0
    for i, t in enumerate(tokens):
        data = bytes(t) if isinstance(t, (bytes, bytearray)) else bytes(_check_ids(t, 256))
        if not data:
            raise ValueError(f"tokens[{i}] is empty: a token spells at least one byte")
        index.setdefault(data, i)
        longest = max(longest, len(data))
    return index, longest


def _token_at(tokens, i: int) -> bytes:
    t = tokens[i]
    return bytes(t) if isinstance(t, (bytes, bytearray)) else bytes(list(t))


# =============================================================================
# 7. A model's tokenizer: the split, special tokens, the merges and the relabelling
# =============================================================================
class ByteLevelBPE:
    """A byte-level BPE tokenizer: ``encode(text)`` -> the model's ids, ``decode(ids)`` -> text.

    merges:   int (n, 2) in the course's ids (:func:`bpe_encode`).
    split:    "gpt2" or "smollm" (:func:`pretokenize`).
    id_map:   int (256 + n,): the model's id of each course id; -1 for a byte the model has no token
              for. None: the course's ids are the model's.
    specials: {text: model id} of tokens matched whole before the split (``<|im_end|>``); never
              produced by ordinary text, never split.
    encode_piece: the function that merges one piece (default :func:`bpe_encode`; a notebook passes
              the student's own, with the same parameters).

    Encoding remembers each piece it has merged: text repeats its words, so a page is mostly lookups.
    """

    def __init__(self, merges, split: str = "gpt2", id_map=None, specials=None, encode_piece=None):
        self.ranks = merge_ranks(merges)
        self.merges = np.array(sorted(self.ranks, key=self.ranks.get), dtype=np.int64).reshape(-1, 2)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {describe(split)}")
        self.split = split
        n_course = 256 + len(self.merges)
        if id_map is None:
            id_map = np.arange(n_course)
        id_map = np.asarray(id_map)
        if id_map.shape != (n_course,) or id_map.dtype.kind not in "iu":
            raise ValueError(f"id_map must be {n_course} integers (256 bytes + {len(self.merges)} merges), "
                             f"got {describe(id_map)}")
        self.id_map = id_map.astype(np.int64)
        self.specials = dict(specials or {})
        for text, i in self.specials.items():
            if not isinstance(text, str) or not text or isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"specials must map non-empty strings to integer ids, got {text!r}: {i!r}")
        self.vocab_size = int(max([self.id_map.max(initial=-1), *self.specials.values()], default=-1)) + 1
        # decoding: model id -> bytes (-1 in the inverse: an id that is no token)
        table = token_bytes(self.ranks)
        self.bytes_of = [None] * self.vocab_size
        for course, model in enumerate(self.id_map.tolist()):
            if model >= 0:
                if self.bytes_of[model] is not None:
                    raise ValueError(f"id_map gives the model id {model} to two course ids: it must be one-to-one")
                self.bytes_of[model] = table[course]
        for text, i in self.specials.items():
            if self.bytes_of[i] is not None:
                raise ValueError(f"the special token {text!r} has the id {i} of an ordinary token")
            self.bytes_of[i] = text.encode("utf-8")
        self.missing = bytes(b for b in range(256) if self.id_map[b] < 0)
        self._special_split = (re.compile("(" + "|".join(re.escape(t) for t in sorted(self.specials, key=len, reverse=True))
                                          + ")") if self.specials else None)
        self.encode_piece = bpe_encode if encode_piece is None else encode_piece
        self._cache = {}

    # -- text -> ids ----------------------------------------------------------
    def encode(self, text, *, unknown_bytes: str = "error") -> np.ndarray:
        """The model's ids (n,) int64 of ``text`` (a str).

        Special-token strings are matched first (longest first) and become their ids; the text between
        is split (:func:`pretokenize`), each piece is written as bytes and merged (:func:`bpe_encode`),
        and the course's ids are relabelled to the model's. A byte the model has no token for is refused
        (``unknown_bytes="error"``, naming the character) or left out before merging (``"drop"``, what
        Hugging Face's tokenizer does silently)."""
        text = check_text(text)
        if unknown_bytes not in ("error", "drop"):
            raise ValueError(f'unknown_bytes must be "error" or "drop", got {describe(unknown_bytes)}')
        if unknown_bytes == "error":
            self._refuse_missing(text)
        out = []
        for part, special in self.split_specials(text):
            if special:
                out.append(self.specials[part])
                continue
            for piece in pretokenize(part, self.split):
                ids = self._cache.get(piece)
                if ids is None:
                    ids = self._cache[piece] = self._encode_piece(piece)
                out.extend(ids)
        return np.array(out, dtype=np.int64)

    def split_specials(self, text: str) -> list[tuple[str, bool]]:
        """``text`` cut at its special-token strings: (part, is_special) pairs, in order."""
        if self._special_split is None:
            return [(text, False)] if text else []
        parts = self._special_split.split(text)            # odd parts are the special tokens
        return [(part, i % 2 == 1) for i, part in enumerate(parts) if part]

    def _encode_piece(self, piece: str) -> tuple:
        data = piece.encode("utf-8")
        if self.missing:
            data = data.translate(None, self.missing)       # what "drop" leaves; "error" refused them already
        if not data:
            return ()
        if self.encode_piece is bpe_encode:
            merged = bpe_encode(list(data), self.ranks)
        else:
            # Another function (a student's) takes the merges as an (n, 2) array and may well rebuild a table of
            # all 48,900 for every piece. It gets the merges that can occur in this piece -- those whose token is a
            # stretch of its bytes -- renumbered 256, 257, ... in rank order, and its ids are mapped back: the same
            # merges in the same order, so the same result, at a small fraction of the cost.
            relevant = self._relevant_merges(data)
            local_id = {256 + r: 256 + k for k, r in enumerate(relevant)}
            local = [[local_id.get(b, b) for b in self.merges[r].tolist()] for r in relevant]
            merged = np.asarray(self.encode_piece(list(data), np.array(local, dtype=np.int64).reshape(-1, 2)))
            merged = np.array([i if i < 256 else 256 + relevant[i - 256] for i in merged.tolist()], dtype=np.int64)
        return tuple(self.id_map[merged].tolist())

    def _relevant_merges(self, data: bytes) -> list:
        """The ranks of the merges whose token is a stretch of ``data``, in rank order: the only ones that can
        apply while merging it (every token the merging makes spells a stretch of the piece)."""
        if not hasattr(self, "_merge_of_bytes"):
            table = token_bytes(self.ranks)
            self._merge_of_bytes = {table[256 + r]: r for r in range(len(self.merges))}
            self._longest = max((len(t) for t in table), default=1)
        found, n = set(), len(data)
        for i in range(n):
            for j in range(i + 2, min(n, i + self._longest) + 1):
                r = self._merge_of_bytes.get(data[i:j])
                if r is not None:
                    found.add(r)
        return sorted(found)

    def _refuse_missing(self, text: str) -> None:
        if not self.missing:
            return
        data = text.encode("utf-8")
        found = re.search(b"[" + re.escape(self.missing) + b"]", data)
        if found:
            index = len(data[:found.start()].decode("utf-8", errors="ignore"))
            raise ValueError(
                f"text[{index}] = {text[index]!r} (U+{ord(text[index]):04X}) cannot be tokenized: its UTF-8 byte "
                f"0x{data[found.start()]:02x} has no token in this vocabulary. The model's own tokenizers (Hugging "
                "Face, llama.cpp) drop such bytes silently; pass unknown_bytes=\"drop\" to do the same, or remove "
                "the character")

    # -- ids -> text ----------------------------------------------------------
    def decode_bytes(self, ids) -> bytes:
        """The bytes the model's ids (n,) spell, joined."""
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise TypeError(f"ids must be a 1-D sequence of integer token ids, got {describe(ids)}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            bad = int(np.flatnonzero((arr < 0) | (arr >= self.vocab_size))[0])
            raise ValueError(f"ids must lie in 0..{self.vocab_size - 1} (the vocabulary has {self.vocab_size} "
                             f"tokens), got {int(arr[bad])} at ids[{bad}]")
        table = self.bytes_of
        try:
            return b"".join(table[i] for i in arr.tolist())
        except TypeError:                                   # a None: an id between the tokens
            bad = next(k for k, i in enumerate(arr.tolist()) if table[i] is None)
            raise ValueError(f"ids[{bad}] = {int(arr[bad])} is no token of this vocabulary") from None

    def decode(self, ids) -> str:
        """The text of the model's ids (n,): special tokens as their text; bytes that are not valid
        UTF-8 (a character cut between ids) as U+FFFD, as the model's own decoders do."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def id_to_token(self, i) -> str:
        """The vocabulary file's string of the model's id ``i`` (``"ĠParis"``; a special token's text)."""
        data = self.decode_bytes([i])
        if int(i) in self.specials.values():
            return data.decode("utf-8")
        symbols = byte_symbols()
        return "".join(symbols[b] for b in data)

    def token_to_id(self, token: str):
        """The model's id of a vocabulary string (``"ĠParis"``, ``"<|im_end|>"``), or None."""
        if token in self.specials:
            return self.specials[token]
        try:
            data = symbols_to_bytes(token)
        except ValueError:
            return None
        ids = self.encode_bytes_whole(data)
        return ids

    def encode_bytes_whole(self, data: bytes):
        """The model's id of the token spelling exactly ``data``, or None."""
        if not hasattr(self, "_id_of_bytes"):
            self._id_of_bytes = {b: i for i, b in enumerate(self.bytes_of) if b is not None and
                                 i not in self.specials.values()}
        return self._id_of_bytes.get(bytes(data))

    def tokens(self, ids) -> list[str]:
        """The vocabulary strings of the model's ids, e.g. ``['The', 'Ġcapital', ...]``."""
        return [self.id_to_token(i) for i in np.asarray(ids).tolist()]

    def with_encode_piece(self, encode_piece) -> "ByteLevelBPE":
        """The same tokenizer merging each piece with ``encode_piece`` (e.g. a student's ``bpe_encode``)."""
        twin = object.__new__(ByteLevelBPE)
        twin.__dict__.update(self.__dict__)
        twin.encode_piece, twin._cache = encode_piece, {}
        return twin


# =============================================================================
# 8. From a vocabulary file: token strings and "a b" merges -> course merges and the relabelling
# =============================================================================
def from_vocabulary(tokens, merges, split: str = "gpt2", special_ids=()) -> ByteLevelBPE:
    """A :class:`ByteLevelBPE` from a vocabulary file's lists (a GGUF file's ``tokenizer.ggml.tokens``
    and ``tokenizer.ggml.merges``, or GPT-2's ``vocab.json`` and ``merges.txt``).

    tokens:      list of str: the token string of each model id (byte-level symbols, :func:`byte_symbols`).
    merges:      list of "a b" strings in rank order: merge r joins the tokens a and b into the token a+b.
    special_ids: the model ids of special tokens (control tokens), matched whole in text.

    Every merge must join two tokens that exist before it (a byte or an earlier merge's result) into a
    token of ``tokens``; anything else is refused, naming the merge.
    """
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens must be a list of str, got {describe(tokens)}")
    if isinstance(merges, str) or not all(isinstance(m, str) for m in merges):
        raise TypeError(f"merges must be a list of 'a b' strings, got {describe(merges)}")
    model_id = {}
    for i, t in enumerate(tokens):
        model_id.setdefault(t, i)
    specials = {}
    for i in special_ids:
        if not 0 <= int(i) < len(tokens):
            raise ValueError(f"special_ids holds {i}, but tokens has only {len(tokens)} entries")
        specials[tokens[int(i)]] = int(i)
    symbols = byte_symbols()
    course_of = {symbols[b]: b for b in range(256)}            # token string -> course id
    id_map = [model_id.get(symbols[b], -1) for b in range(256)]
    pairs = []
    for r, line in enumerate(merges):
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"merges[{r}] = {line!r} is not two tokens separated by one space")
        a, b = parts
        for side in (a, b):
            if side not in course_of:
                raise ValueError(f"merges[{r}] = {line!r}: {side!r} is neither a byte nor made by an earlier merge; "
                                 "the merges do not match the vocabulary")
        joined = a + b
        if joined not in model_id:
            raise ValueError(f"merges[{r}] = {line!r} makes {joined!r}, which is not in tokens: the merges do not "
                             "match the vocabulary")
        if joined in course_of:
            raise ValueError(f"merges[{r}] = {line!r} makes {joined!r} a second time")
        course_of[joined] = 256 + r
        pairs.append((course_of[a], course_of[b]))
        id_map.append(model_id[joined])
    return ByteLevelBPE(np.array(pairs, dtype=np.int64).reshape(-1, 2), split, np.array(id_map), specials)


# =============================================================================
# 9. The chat template: SmolLM2's (ChatML), written out
# =============================================================================
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(messages, add_generation_prompt: bool = True, default_system: str = SMOLLM2_SYSTEM) -> str:
    """The text SmolLM2 was fine-tuned on for a conversation (ChatML, what the file's Jinja template
    renders): every message as ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a system message first
    (``default_system`` when the conversation does not start with one), and ``<|im_start|>assistant\\n``
    at the end when ``add_generation_prompt``, so that the model's next tokens are the answer."""
    if isinstance(messages, (str, dict)) or not hasattr(messages, "__iter__"):
        raise TypeError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, got {describe(messages)}")
    messages = list(messages)
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TypeError(f"messages[{i}] must be a dict with str 'role' and 'content', got {describe(m)}")
        if i == 0 and m["role"] != "system":
            parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)
