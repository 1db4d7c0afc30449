"""WordPiece, the tokenizer of BERT and all-MiniLM-L6-v2, from first principles (notebooks 07 and 12).

BERT's tokenizer does not see bytes but characters, and it knows 30,522 strings. Text becomes ids in
three steps, one function each::

    normalize(text)            clean (drop control characters, every whitespace a space), pad each
                               Chinese character with spaces, strip accents (NFD, drop the marks),
                               lower-case -- one character at a time
    basic_split(text)          words: cut at whitespace, every punctuation character a word of its own
    wordpiece_tokenize(w, v)   a word -> ids: greedy, longest match first; a piece that does not start
                               the word is looked up as "##piece"; a word with any part no piece
                               covers is one [UNK]

then ``[CLS] ... [SEP]``, truncation to a maximum length and padding of a batch to its longest
sentence (:class:`WordPiece`). The rules are those of BERT's ``BasicTokenizer`` and
``WordpieceTokenizer`` as Hugging Face's ``tokenizers`` runs them for MiniLM's ``tokenizer.json``
(``BertNormalizer``, ``BertPreTokenizer``, ``WordPiece``, ``TemplateProcessing``);
tests/test_wordpiece.py checks every id against that library. The vocabulary is the model package's
``vocab.txt``: one token per line, its id the line number.

Where Python and the library (Rust) read Unicode differently, the library's reading is followed:
lower-casing is per character (``str.lower`` of a whole word turns a final capital sigma into ``ς``,
Rust's per-character lower case into ``σ``); "whitespace" is Unicode's White_Space property
(``str.isspace`` also counts the separators U+001C..U+001F); "control" means the categories Cc, Cf
and Co, not the unassigned Cn. And the library's character categories come from an older Unicode
version than Python 3.11's (14.0), its lower case from a newer one: the few hundred characters on
which they disagree are listed below (:data:`REFERENCE_UNICODE`), measured over all code points by
tests/test_wordpiece.py.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._checks import describe, positive_int

UNK, CLS, SEP, PAD = "[UNK]", "[CLS]", "[SEP]", "[PAD]"
PREFIX = "##"                          # a piece that continues a word
MAX_WORD_CHARS = 100                   # a longer word is [UNK] at once

# Unicode's White_Space property (Rust's char::is_whitespace): what splits words.
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# The CJK Unified Ideographs blocks: each such character is a word of its own (Japanese kana and
# Korean Hangul are not in them: those scripts separate words with spaces).
CHINESE_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                  (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _char_set(spec: str) -> frozenset:
    """The characters of a class written as in a regular expression: ``"a-cx"`` -> {a, b, c, x}."""
    chars, i = set(), 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            chars.update(chr(c) for c in range(ord(spec[i]), ord(spec[i + 2]) + 1))
            i += 3
        else:
            chars.add(spec[i])
            i += 1
    return frozenset(chars)


# Where the reference (tokenizers 0.23: the unicode_categories crate's tables, an older Unicode, and Rust's
# lower case, a newer one) reads a character otherwise than Python 3.11's unicodedata (Unicode 14.0).
# Measured over every code point (tests/test_wordpiece.py measures again); each set is small.
REFERENCE_UNICODE = {
    # format characters (Cf) newer than the reference's tables: kept, not cleaned away
    "not_control": _char_set("\u0890-\u0891\u08e2\U000110cd\U00013430-\U00013438"),
    # punctuation (P*) newer than the reference's tables: not split off
    "not_punctuation": _char_set(
        "\u061d\u09fd\u0a76\u0c77\u0c84\u1b7d-\u1b7e\u2e43-\u2e4f\u2e52-\u2e5d\U00010ead\U00010f55-\U00010f59"
        "\U00010f86-\U00010f89\U0001144b-\U0001144f\U0001145a-\U0001145b\U0001145d\U00011660-\U0001166c\U000116b9"
        "\U0001183b\U00011944-\U00011946\U000119e2\U00011a3f-\U00011a46\U00011a9a-\U00011a9c\U00011a9e-\U00011aa2"
        "\U00011c41-\U00011c45\U00011c70-\U00011c71\U00011ef7-\U00011ef8\U00011fff\U00012ff1-\U00012ff2"
        "\U00016e97-\U00016e9a\U00016fe2\U0001e95e-\U0001e95f"),
    # punctuation in the reference's tables, another category since
    "punctuation": _char_set("\u166d\U000111c9"),
    # non-spacing marks (Mn) newer than the reference's tables: not stripped
    "not_mark": _char_set(
        "\u07fd\u0898-\u089f\u08ca-\u08e1\u09fe\u0afa-\u0aff\u0b55\u0c04\u0c3c\u0d00\u0d3b-\u0d3c\u0d81\u0eba"
        "\u180f\u1885-\u1886\u1abf-\u1ace\u1df6-\u1dfb\ua82c\ua8c5\ua8ff\ua9bd\U00010d24-\U00010d27"
        "\U00010eab-\U00010eac\U00010f46-\U00010f50\U00010f82-\U00010f85\U00011070\U00011073-\U00011074\U000110c2"
        "\U000111c9\U000111cf\U0001123e\U0001133b\U00011438-\U0001143f\U00011442-\U00011444\U00011446\U0001145e"
        "\U0001182f-\U00011837\U00011839-\U0001183a\U0001193b-\U0001193c\U0001193e\U00011943\U000119d4-\U000119d7"
        "\U000119da-\U000119db\U000119e0\U00011a01-\U00011a0a\U00011a33-\U00011a38\U00011a3b-\U00011a3e\U00011a47"
        "\U00011a51-\U00011a56\U00011a59-\U00011a5b\U00011a8a-\U00011a96\U00011a98-\U00011a99\U00011c30-\U00011c36"
        "\U00011c38-\U00011c3d\U00011c3f\U00011c92-\U00011ca7\U00011caa-\U00011cb0\U00011cb2-\U00011cb3"
        "\U00011cb5-\U00011cb6\U00011d31-\U00011d36\U00011d3a\U00011d3c-\U00011d3d\U00011d3f-\U00011d45\U00011d47"
        "\U00011d90-\U00011d91\U00011d95\U00011d97\U00011ef3-\U00011ef4\U00016f4f\U00016fe4\U0001cf00-\U0001cf2d"
        "\U0001cf30-\U0001cf46\U0001e000-\U0001e006\U0001e008-\U0001e018\U0001e01b-\U0001e021\U0001e023-\U0001e024"
        "\U0001e026-\U0001e02a\U0001e130-\U0001e136\U0001e2ae\U0001e2ec-\U0001e2ef\U0001e944-\U0001e94a"),
    # a non-spacing mark in the reference's tables, another category since
    "mark": _char_set("\u1734"),
    # decomposed by Python's NFD (Unicode 13 added the decomposition), kept whole by the reference's
    "nfd_whole": _char_set("\U00011938"),
}
# capital -> small letters of the newest Unicode: Rust lower-cases them, Python 3.11 does not know them
_NEWER_CASE = ("\u1c89\u1c8a\ua7cb\u0264\ua7cc\ua7cd\ua7ce\ua7cf\ua7d2\ua7d3\ua7d4\ua7d5\ua7da\ua7db\ua7dc\u019b"
               + "".join(chr(0x10D50 + k) + chr(0x10D70 + k) for k in range(22))
               + "".join(chr(0x16EA0 + k) + chr(0x16EBB + k) for k in range(25)))
REFERENCE_UNICODE["lower"] = dict(zip(_NEWER_CASE[0::2], _NEWER_CASE[1::2]))


# =============================================================================
# 1. Normalisation, one character at a time
# =============================================================================
def is_whitespace(char: str) -> bool:
    return char in WHITE_SPACE


def is_control(char: str) -> bool:
    """Controls, format characters and private use (categories Cc, Cf, Co), except tab, newline and
    carriage return, which count as whitespace."""
    return (char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf", "Co")
            and char not in REFERENCE_UNICODE["not_control"])


def is_punctuation(char: str) -> bool:
    """ASCII punctuation (``$``, ``+``, ``<`` ... although Unicode calls some of them symbols) or any
    character of Unicode's punctuation categories (P*)."""
    return (char in ASCII_PUNCTUATION or char in REFERENCE_UNICODE["punctuation"]
            or (unicodedata.category(char).startswith("P") and char not in REFERENCE_UNICODE["not_punctuation"]))


def is_nonspacing_mark(char: str) -> bool:
    """An accent or other mark written over or under the letter before it (category Mn)."""
    return char in REFERENCE_UNICODE["mark"] or (unicodedata.category(char) == "Mn"
                                                  and char not in REFERENCE_UNICODE["not_mark"])


def is_chinese_char(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in CHINESE_BLOCKS)


def clean_text(text: str) -> str:
    """Drop NUL, U+FFFD and control characters; write every whitespace character as a space."""
    return "".join(" " if is_whitespace(c) else c for c in text
                   if not (c == "\0" or c == "\ufffd" or is_control(c)))


def pad_chinese_chars(text: str) -> str:
    """A space before and after each CJK ideograph, so that each becomes a word of its own."""
    return "".join(f" {c} " if is_chinese_char(c) else c for c in text)


def strip_accents(text: str) -> str:
    """Decompose (NFD: é -> e + U+0301) and drop the non-spacing marks (category Mn)."""
    return "".join(c for c in _nfd(text) if not is_nonspacing_mark(c))


def _nfd(text: str) -> str:
    whole = [c for c in REFERENCE_UNICODE["nfd_whole"] if c in text]
    if not whole:
        return unicodedata.normalize("NFD", text)
    parts = re.split("(" + "|".join(whole) + ")", text)            # odd parts: a character kept whole
    return "".join(p if i % 2 else unicodedata.normalize("NFD", p) for i, p in enumerate(parts))


def lowercase(text: str) -> str:
    """Lower case, character by character (no context: a final Σ becomes σ, as in the reference)."""
    newer = REFERENCE_UNICODE["lower"]
    return "".join(newer.get(c) or c.lower() for c in text)


def normalize(text: str, *, lower: bool = True, accents: bool | None = None, chinese: bool = True) -> str:
    """BERT's normalisation in its order: clean, pad Chinese characters, strip accents (by default
    whenever lower-casing: ``accents=None``), lower-case."""
    text = clean_text(text)
    if chinese:
        text = pad_chinese_chars(text)
    if lower if accents is None else accents:
        text = strip_accents(text)
    return lowercase(text) if lower else text


# =============================================================================
# 2. Words: whitespace and punctuation
# =============================================================================
def basic_split(text: str) -> list[str]:
    """The words of normalised text: cut at whitespace (dropped), and every punctuation character a
    word of its own (kept): ``"hi, you!"`` -> ``["hi", ",", "you", "!"]``."""
    words, current = [], []
    for c in text:
        if is_whitespace(c) or is_punctuation(c):
            if current:
                words.append("".join(current))
                current = []
            if not is_whitespace(c):
                words.append(c)
        else:
            current.append(c)
    if current:
        words.append("".join(current))
    return words


# =============================================================================
# 3. WordPiece: greedy longest-match-first
# =============================================================================
def wordpiece_tokenize(word, vocab):
    """The ids of one word, greedy and longest match first.

    word:    str, one word of :func:`basic_split` (no whitespace, normalised).
    vocab:   list of str (the token of each id) or a dict {token: id}; it holds "[UNK]".
    returns: int64 array of ids: from the start of the word, the longest piece in vocab, then from
             where it ended the longest "##piece" in vocab, and so on to the end. If at some point no
             piece matches, or the word is longer than 100 characters, the whole word is [UNK]: one id.
    """
    index = _vocab_index(vocab)
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {describe(word)}")
    if UNK not in index:
        raise ValueError(f"vocab must hold the unknown token {UNK!r}")
    if len(word) > MAX_WORD_CHARS:
        return np.array([index[UNK]], dtype=np.int64)
    ids, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else PREFIX + word[start:end]
            if piece in index:
                ids.append(index[piece])
                start = end
                break
        else:
            return np.array([index[UNK]], dtype=np.int64)
    return np.array(ids, dtype=np.int64)


def _vocab_index(vocab) -> dict:
    if isinstance(vocab, dict):
        return vocab
    if isinstance(vocab, str) or not hasattr(vocab, "__len__"):
        raise TypeError(f"vocab must be a list of str or a dict {{str: id}}, got {describe(vocab)}")
    index = {}
    for i, token in enumerate(vocab):
        if not isinstance(token, str):
            raise TypeError(f"vocab[{i}] must be a str, got {describe(token)}")
        index.setdefault(token, i)
    return index


# =============================================================================
# 4. A model's tokenizer: special tokens, [CLS]/[SEP], truncation, padding
# =============================================================================
@dataclass(frozen=True)
class TokenBatch:
    """A padded batch: ``input_ids``, ``attention_mask`` (1 = real token), ``token_type_ids``, all
    ``(batch, n)`` int64, and the tokens as strings (``[PAD]`` included)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    tokens: list

    @property
    def lengths(self) -> np.ndarray:
        return self.attention_mask.sum(axis=1)


class WordPiece:
    """BERT's tokenizer: ``encode(text)`` -> ids with ``[CLS]`` and ``[SEP]``, ``encode_batch`` -> a
    padded :class:`TokenBatch`.

    vocab:       list of str, the token of each id (``vocab.txt``).
    max_length:  ids per sentence, [CLS] and [SEP] included (longer sentences are cut at the end);
                 None: no limit.
    pad_to:      None: a batch is padded to its longest sentence; an int: every sentence to that length.
    lower:       lower-case (and strip accents) as uncased BERT does.
    specials:    tokens matched whole in the raw text, before normalisation ("[SEP]" in a text is the
                 id of [SEP], not "[", "sep", "]"): the library's "added tokens".
    encode_word: the function that splits one word (default :func:`wordpiece_tokenize`; a notebook passes
                 the student's own, with the same parameters).
    """

    def __init__(self, vocab, max_length=None, pad_to=None, lower: bool = True,
                 specials=(PAD, UNK, CLS, SEP, "[MASK]"), encode_word=None):
        self.vocab = list(vocab)
        self.index = _vocab_index(self.vocab)
        for token in (UNK, CLS, SEP, PAD):
            if token not in self.index:
                raise ValueError(f"vocab must hold {token!r}")
        self.max_length = None if max_length is None else positive_int(max_length, "max_length")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must leave room for [CLS] and [SEP] (>= 2), got {max_length}")
        self.pad_to = None if pad_to is None else positive_int(pad_to, "pad_to")
        self.lower = bool(lower)
        self.specials = tuple(sorted((s for s in specials if s in self.index), key=len, reverse=True))
        self.encode_word = wordpiece_tokenize if encode_word is None else encode_word
        self._cache = {}

    @classmethod
    def from_model_folder(cls, folder, max_length=None, pad_to=None, encode_word=None) -> "WordPiece":
        """The tokenizer a model folder describes: ``vocab.txt`` and the settings of ``tokenizer.json``
        (lower case, the added tokens), read as JSON -- no tokenizer library."""
        folder = Path(folder)
        vocab = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
        if vocab and vocab[-1] == "":
            vocab = vocab[:-1]
        settings = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        normalizer = settings.get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer" or (settings.get("model") or {}).get("type") != "WordPiece":
            raise ValueError(f"{folder / 'tokenizer.json'} does not describe BERT's WordPiece tokenizer")
        specials = [t["content"] for t in settings.get("added_tokens", []) if not t.get("normalized", True)]
        return cls(vocab, max_length, pad_to, lower=normalizer.get("lowercase", True), specials=specials,
                   encode_word=encode_word)

    # -- one sentence ---------------------------------------------------------
    def words(self, text) -> list[str]:
        """The words of ``text`` (special tokens kept whole) after normalisation."""
        out = []
        for part, special in self._split_specials(_check_str(text, "text")):
            out.extend([part] if special else basic_split(normalize(part, lower=self.lower)))
        return out

    def encode(self, text, add_special_tokens: bool = True, truncate: bool = True) -> np.ndarray:
        """The ids (n,) int64 of ``text``: its words' pieces, between [CLS] and [SEP] unless
        ``add_special_tokens=False``; cut to ``max_length`` (the two special ids included) when ``truncate``."""
        ids = []
        for word in self.words(text):
            if word in self.specials:
                ids.append(self.index[word])
                continue
            pieces = self._cache.get(word)
            if pieces is None:
                pieces = self._cache[word] = self._encode_word(word)
            ids.extend(pieces)
        room = None if (self.max_length is None or not truncate) else self.max_length - 2 * add_special_tokens
        ids = ids[:room] if room is not None else ids
        if add_special_tokens:
            ids = [self.index[CLS], *ids, self.index[SEP]]
        return np.array(ids, dtype=np.int64)

    def _encode_word(self, word: str) -> tuple:
        if self.encode_word is wordpiece_tokenize:
            return tuple(wordpiece_tokenize(word, self.index).tolist())
        # Another function (a student's) takes the vocabulary as a list and may well index all 30,522 tokens for
        # every word. It gets the tokens that can occur in this word -- [UNK] and the word's substrings that are in
        # the vocabulary, with and without ## -- in vocabulary order, and its ids are mapped back: the same
        # longest matches, so the same result.
        found = {self.index[UNK]}
        if len(word) <= MAX_WORD_CHARS:
            for i in range(len(word)):
                for j in range(i + 1, len(word) + 1):
                    for piece in (word[i:j], PREFIX + word[i:j]):
                        if piece in self.index:
                            found.add(self.index[piece])
        local = sorted(found)                               # local id k is the vocabulary's id local[k]
        ids = np.asarray(self.encode_word(word, [self.vocab[i] for i in local]))
        return tuple(local[k] for k in ids.tolist())

    def _split_specials(self, text: str) -> list[tuple[str, bool]]:
        parts, start, i = [], 0, 0
        while self.specials and i < len(text):
            found = next((s for s in self.specials if text.startswith(s, i)), None)   # longest first
            if found:
                parts.extend([(text[start:i], False), (found, True)])
                i = start = i + len(found)
            else:
                i += 1
        parts.append((text[start:], False))
        return [(p, s) for p, s in parts if p]

    # -- a batch -------------------------------------------------------------
    def encode_batch(self, sentences) -> TokenBatch:
        """Every sentence encoded, then padded with [PAD] (id 0 in MiniLM) to the longest (or to
        ``pad_to``): ids, the attention mask (1 real, 0 pad) and the segment ids (all 0: one segment)."""
        sentences = check_sentences(sentences)
        rows = [self.encode(s) for s in sentences]
        width = max((len(r) for r in rows), default=0) if self.pad_to is None else self.pad_to
        ids = np.full((len(rows), width), self.index[PAD], dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = row[:width], 1
        tokens = [[self.vocab[i] for i in row] for row in ids.tolist()]
        return TokenBatch(ids, mask, np.zeros_like(ids), tokens)

    # -- ids <-> tokens ---------------------------------------------------------
    def token_to_id(self, token: str):
        return self.index.get(token)

    def id_to_token(self, i) -> str:
        i = int(i)
        if not 0 <= i < len(self.vocab):
            raise ValueError(f"ids must lie in 0..{len(self.vocab) - 1}, got {i}")
        return self.vocab[i]

    def tokens(self, ids) -> list[str]:
        return [self.id_to_token(i) for i in np.asarray(ids).tolist()]

    def with_encode_word(self, encode_word) -> "WordPiece":
        """The same tokenizer splitting each word with ``encode_word`` (e.g. a student's function)."""
        twin = object.__new__(WordPiece)
        twin.__dict__.update(self.__dict__)
        twin.encode_word, twin._cache = encode_word, {}
        return twin


def check_sentences(sentences) -> list:
    """``sentences`` as a list of str: a single string (a batch of one?) or a non-string item is refused."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings; wrap a single sentence in a list")
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{i}] must be a string, got {describe(sentence)}")
    return sentences


def _check_str(text, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {describe(text)}")
    return text
