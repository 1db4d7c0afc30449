"""Hidden-test cases of notebook 12 (tokens: training BPE merges, encoding by rank, WordPiece, the shortest spelling).

Inputs are plain lists of ints and strings (no `regex` needed in the sandbox: the pieces come already split);
outputs are integer arrays, compared exactly (tolerance 1e-9 on integers).
"""

from __future__ import annotations

import numpy as np

from transformer_course.bpe import bpe_encode, shortest_tokenization, token_bytes, train_bpe
from transformer_course.wordpiece import wordpiece_tokenize
from . import CASES, Case

EXACT = 1e-9                                      # integer outputs: any difference is a wrong id


# ---------------------------------------------------------------------------
# Texts from a small alphabet, as the bytes of GPT-2-like pieces: words that repeat with Zipf-like
# frequencies (so that merges build on merges), some with a leading space (byte 32), some letters
# outside ASCII (two UTF-8 bytes each: the function works on bytes, not characters), some with a letter
# repeated (overlapping pairs: "aaa" holds (a, a) twice).
# ---------------------------------------------------------------------------
ALPHABETS = ("abcde", "etaoin", "xyzé", "lmnopü", "rst")


def _word(rng, letters, low, high):
    return "".join(rng.choice(list(letters)) for _ in range(int(rng.integers(low, high + 1))))


def _pieces(rng, n_words, n_pieces, repeats=False):
    letters = ALPHABETS[int(rng.integers(len(ALPHABETS)))]
    vocab = [_word(rng, letters, 1, 7) for _ in range(n_words)]
    if repeats:                                 # among the most frequent words: runs of one letter
        vocab = [letters[0] * int(rng.integers(3, 7)), letters[1] * 4 + letters[0]] + vocab
    weights = 1.0 / np.arange(1, len(vocab) + 1)                     # Zipf: the first words are common
    picks = rng.choice(len(vocab), size=n_pieces, p=weights / weights.sum())
    return [list(((" " if rng.random() < 0.5 else "") + vocab[i]).encode("utf-8")) for i in picks]


def _train_inputs(rng, kind):
    if kind == "text":
        return {"chunks": _pieces(rng, int(rng.integers(15, 40)), int(rng.integers(80, 250)), repeats=True),
                "n_merges": int(rng.integers(8, 30))}
    if kind == "ties":
        # every distinct piece the same number of times: most pair counts tie, the tie rule decides
        letters = ALPHABETS[int(rng.integers(len(ALPHABETS)))]
        words = {_word(rng, letters, 2, 5) for _ in range(12)} | {letters[0] * 3}
        times = int(rng.integers(1, 4))
        chunks = [list(w.encode("utf-8")) for w in sorted(words) for _ in range(times)]
        order = rng.permutation(len(chunks))
        return {"chunks": [chunks[i] for i in order], "n_merges": int(rng.integers(5, 15))}
    # "exhausted": a few short pieces and more merges than pairs: the merges stop early
    letters = ALPHABETS[int(rng.integers(len(ALPHABETS)))]
    chunks = [list(_word(rng, letters, 2, 3).encode("utf-8"))]          # at least one pair
    chunks += [list(_word(rng, letters, 1, 3).encode("utf-8")) for _ in range(int(rng.integers(2, 6)))]
    chunks.append([ord(letters[0])])                                    # a one-byte piece: no pair at all
    return {"chunks": chunks, "n_merges": int(rng.integers(15, 40))}


def _train_ref(chunks, n_merges):
    return train_bpe(chunks, n_merges)


for _kind, _what in (("text", "80-250 Zipf-distributed pieces of a 3-6 letter alphabet, 8-29 merges"),
                     ("ties", "every distinct piece equally often: the tie rule (smallest pair) decides"),
                     ("exhausted", "a few short pieces, more merges asked than there are pairs: fewer returned")):
    CASES[f"tokens.train_bpe_{_kind}"] = Case(lambda rng, k=_kind: _train_inputs(rng, k), _train_ref, ("merges",),
                                              tol=EXACT, description=_what)


# ---------------------------------------------------------------------------
# bpe_encode(ids, merges): merges learned from a text and new words of the same alphabet ("trained"),
# or random merge lists whose ranks have nothing to do with position, so that merging the leftmost
# mergeable pair, the highest rank, or each pair once in one sweep gives other ids ("ranked"), and long
# pieces with runs of one letter (the leftmost of equal pairs first; "long").
# ---------------------------------------------------------------------------
def _random_merges(rng, letters, n):
    base = sorted({b for c in letters for b in c.encode("utf-8")})
    merges, seen = [], set()
    while len(merges) < n:
        pool = base + [256 + r for r in range(len(merges))]
        a = int(rng.choice(pool[-6:] if rng.random() < 0.4 and len(pool) > len(base) else base))
        b = int(rng.choice(pool[-6:] if rng.random() < 0.3 and len(pool) > len(base) else base))
        if (a, b) not in seen:
            seen.add((a, b))
            merges.append([a, b])
    return merges


def _encode_inputs(rng, kind):
    letters = ALPHABETS[int(rng.integers(len(ALPHABETS)))]
    if kind == "trained":
        chunks = _pieces(rng, 20, 150, repeats=True)
        merges = train_bpe(chunks, int(rng.integers(10, 40))).tolist()
        letters = "".join(sorted({chr(b) for c in chunks for b in c if b < 128}))
        ids = list((" " + _word(rng, letters, 6, 20)).encode("utf-8"))
    elif kind == "ranked":
        merges = _random_merges(rng, letters, int(rng.integers(12, 30)))
        ids = list(_word(rng, letters, 25, 60).encode("utf-8"))
    else:
        merges = _random_merges(rng, letters, 20)
        a = ord(letters[0])
        if [a, a] not in merges:
            merges.append([a, a])
        ids = list("".join(letters[0] * int(rng.integers(2, 7)) + _word(rng, letters, 1, 4)
                           for _ in range(40)).encode("utf-8"))
    return {"ids": ids, "merges": merges}


def _encode_ref(ids, merges):
    return bpe_encode(ids, merges)


for _kind, _what in (("trained", "merges learned from a Zipf text, a new word of its alphabet with a leading space"),
                     ("ranked", "random merge lists (ranks unrelated to positions), 25-60 bytes"),
                     ("long", "100+ bytes with runs of one letter and the merge (a, a): leftmost of equal pairs first")):
    CASES[f"tokens.bpe_encode_{_kind}"] = Case(lambda rng, k=_kind: _encode_inputs(rng, k), _encode_ref, ("ids",),
                                               tol=EXACT, description=_what)


# ---------------------------------------------------------------------------
# wordpiece_tokenize(word, vocab): a vocabulary of word-initial pieces and "##" pieces over a small
# alphabet, in random order (ids are positions). "greedy": a word that splits, with a shorter and a
# longer matching piece at some point (longest first matters); "unk": a word that matches for a while,
# then no piece continues it: the whole word is one [UNK]; "long": a word of exactly 100 characters (split as
# usual); "too_long": 101 characters (one [UNK], although pieces would cover it).
# ---------------------------------------------------------------------------
def _wordpiece_vocab(rng, letters):
    starts = {_word(rng, letters, 1, 5) for _ in range(30)} | set(letters)
    conts = {"##" + _word(rng, letters, 1, 4) for _ in range(30)} | {"##" + c for c in letters}
    vocab = sorted(starts | conts) + ["[UNK]"]
    return [vocab[i] for i in rng.permutation(len(vocab))]


def _wordpiece_inputs(rng, kind):
    letters = "abcdef"[: int(rng.integers(3, 7))]
    vocab = _wordpiece_vocab(rng, letters)
    if kind == "greedy":
        pieces = [p for p in vocab if len(p) >= 3 and not p.startswith("##") and p != "[UNK]"]
        word = str(rng.choice(pieces)) + _word(rng, letters, 3, 10)
    elif kind == "unk":
        vocab = [v for v in vocab if letters[-1] not in v]                      # no piece holds the last letter
        word = _word(rng, letters[:-1], 2, 6) + letters[-1] + _word(rng, letters, 0, 3)
    else:
        word = _word(rng, letters, 100, 100) if kind == "long" else _word(rng, letters, 101, 101)
    return {"word": word, "vocab": vocab}


def _wordpiece_ref(word, vocab):
    return wordpiece_tokenize(word, vocab)


for _kind, _what in (("greedy", "a word that splits, where a shorter and a longer piece both match"),
                     ("unk", "a word whose last letters no piece continues: one [UNK] for the whole word"),
                     ("long", "exactly 100 characters: split as usual"),
                     ("too_long", "101 characters, every one of them coverable: one [UNK]")):
    CASES[f"tokens.wordpiece_{_kind}"] = Case(lambda rng, k=_kind: _wordpiece_inputs(rng, k), _wordpiece_ref, ("ids",),
                                              tol=EXACT, description=_what)


# ---------------------------------------------------------------------------
# shortest_tokenization(data, tokens) -> ids, checked as (number of ids, whether they spell data).
# Several spellings may tie, so the ids themselves are not compared. "bpe": a BPE vocabulary learned
# from a Zipf text (BPE's own encoding is often longer); "trap": tokens where longest-first is not the
# shortest, from the start (ab + cde with abc present: greedy takes abc, d, e) and from the end (abc + de
# with cde present: greedy takes cde, b, a).
# ---------------------------------------------------------------------------
def _shortest_inputs(rng, kind):
    if kind == "bpe":
        chunks = _pieces(rng, 20, 150, repeats=True)
        merges = train_bpe(chunks, int(rng.integers(20, 60)))
        table = token_bytes(merges)
        used = sorted({b for c in chunks for b in c})
        tokens = [list(table[b]) for b in used] + [list(t) for t in table[256:]]
        data = [b for c in (chunks[int(i)] for i in rng.permutation(len(chunks))[:12]) for b in c]
    else:
        letters = "abcdefghijklmnopqrst"          # many letters: the traps rarely share a piece by chance
        tokens = [[ord(c)] for c in letters]
        data = []
        n_traps = int(rng.integers(4, 9))
        for k in range(n_traps):
            if k % 2 == 0:      # against longest-first from the start: a + b0 is longer than a
                a, b = _word(rng, letters, 2, 2), _word(rng, letters, 3, 3)
                tokens += [list((a + b[0]).encode()), list(a.encode()), list(b.encode())]   # greedy: a+b0, b1, b2
            else:               # against longest-first from the end: a2 + b is longer than b
                a, b = _word(rng, letters, 3, 3), _word(rng, letters, 2, 2)
                tokens += [list((a[-1] + b).encode()), list(a.encode()), list(b.encode())]  # greedy: a2+b, a1, a0
            data += list((a + b).encode())
        order = rng.permutation(len(tokens))
        tokens = [tokens[i] for i in order]
    return {"data": data, "tokens": tokens}


def _shortest_ref(data, tokens):
    return float(len(shortest_tokenization(data, tokens))), 1.0


for _kind, _what in (("bpe", "a learned BPE vocabulary and a text of its pieces"),
                     ("trap", "tokens where longest-first, from the start or from the end, is not the shortest")):
    CASES[f"tokens.shortest_{_kind}"] = Case(lambda rng, k=_kind: _shortest_inputs(rng, k), _shortest_ref,
                                             ("n_tokens", "spells_data"), tol=EXACT, description=_what)


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py: no array-rank or
# attention situation applies (the special cases are named by each case's description).
COVERAGE = {
    "train_bpe": {"cases": ("tokens.train_bpe_text", "tokens.train_bpe_ties", "tokens.train_bpe_exhausted"),
                  "requires": set()},
    "bpe_encode": {"cases": ("tokens.bpe_encode_trained", "tokens.bpe_encode_ranked", "tokens.bpe_encode_long"),
                   "requires": set()},
    "wordpiece_tokenize": {"cases": ("tokens.wordpiece_greedy", "tokens.wordpiece_unk", "tokens.wordpiece_long",
                                     "tokens.wordpiece_too_long"),
                           "requires": set()},
    "shortest_tokenization": {"cases": ("tokens.shortest_bpe", "tokens.shortest_trap"), "requires": set()},
}

# The package's names that compute an exercise under another name, blocked in notebook 12's sandbox.
# ByteLevelBPE and WordPiece merge and split through bpe_encode and wordpiece_tokenize themselves (thin holders).
# bpe.merges_problem replays the training rule and names the pair it expected at the first wrong merge: asked
# again and again, it would write train_bpe for the student, so it is train_bpe's twin (the visible test calls it
# through testing.cross_check, which skips it while grading; the hidden cases check the same rule).
TWINS: dict = {"train_bpe": ("merges_problem",)}
