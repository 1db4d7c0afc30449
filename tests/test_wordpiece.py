"""WordPiece (transformer_course.wordpiece) against all-MiniLM-L6-v2's own tokenizer, id for id.

MiniLM's own tokenizer is its ``tokenizer.json`` run by the ``tokenizers`` library (BertNormalizer,
BertPreTokenizer, WordPiece, [CLS] ... [SEP]). Checked on every sentence notebook 07 and
tests/test_pretrained_minilm.py use, and on tests/fixtures/tokenizer_strings.py's 2,264 varied strings;
a mismatch fails with the string and both id lists. Then the batch (truncation at 256, padding to the
longest, and the file's own 128), the Unicode tables (wordpiece.REFERENCE_UNICODE) measured again over
every code point, greedy longest-match-first by hand, and bad input.
"""

from __future__ import annotations

import importlib.util
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from transformer_course import pretrained as tp
from transformer_course import wordpiece as wp

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import tokenizer_strings  # noqa: E402

HAS_MODEL = importlib.util.find_spec(tp.MODEL_PACKAGE) is not None
needs_model = pytest.mark.skipif(not HAS_MODEL, reason=f"MiniLM is not installed: {tp.INSTALL_HINT}")


@pytest.fixture(scope="module")
def ours():
    if not HAS_MODEL:
        pytest.skip("MiniLM is not installed")
    return wp.WordPiece.from_model_folder(tp.model_path())


@pytest.fixture(scope="module")
def reference():
    tk = pytest.importorskip("tokenizers", reason="pip install tokenizers (requirements/test-lock.txt)")
    if not HAS_MODEL:
        pytest.skip("MiniLM is not installed")
    tokenizer = tk.Tokenizer.from_file(str(tp.model_path() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def compare(ours, reference, items):
    mismatches = []
    for kind, text in items:
        mine, theirs = ours.encode(text, truncate=False).tolist(), reference.encode(text).ids
        if mine != theirs:
            mismatches.append((kind, text, mine, theirs))
    lines = [f"{len(mismatches)} of {len(items)} strings differ; the first ones:"]
    for kind, text, mine, theirs in mismatches[:5]:
        lines.append(f"  [{kind}] {text[:200]!r}\n    course:    {mine[:40]}\n    reference: {theirs[:40]}")
    assert not mismatches, "\n".join(lines)


def test_ids_equal_minilms_own_tokenizer_on_notebook_07s_sentences(ours, reference):
    sentences = tokenizer_strings.minilm_sentences()
    assert len(sentences) >= 100 and "The cat sat on the mat." in sentences
    compare(ours, reference, [("notebook 07 and its tests", s) for s in sentences])


def test_ids_equal_minilms_own_tokenizer_on_varied_strings(ours, reference):
    strings = tokenizer_strings.varied_strings()
    compare(ours, reference, strings)
    # what the varied strings exercise here: [UNK], accents stripped, CJK split, specials matched whole
    unk = ours.index[wp.UNK]
    assert sum(unk in ours.encode(t, truncate=False) for _, t in strings) > 300
    assert ours.tokens(ours.encode("Naïve CAFÉ", add_special_tokens=False)) == ["naive", "cafe"]
    assert ours.tokens(ours.encode("人人生", add_special_tokens=False)) == ["人", "人", "生"]
    assert ours.encode("a [SEP] b [sep]", add_special_tokens=False).tolist() == reference.encode(
        "a [SEP] b [sep]", add_special_tokens=False).ids == [1037, 102, 1038, 1031, 19802, 1033]


def test_batches_equal_the_reference_with_truncation_and_padding(reference):
    tk = pytest.importorskip("tokenizers")
    sentences = tokenizer_strings.minilm_sentences()[:40] + ["word " * 400, "", "Hi!"]
    ours = tp.load_tokenizer()                                   # truncation at 256, padding to the longest
    theirs = tk.Tokenizer.from_file(str(tp.model_path() / "tokenizer.json"))
    theirs.no_padding()
    theirs.enable_truncation(max_length=256)
    theirs.enable_padding(pad_id=0, pad_token="[PAD]")
    batch, encodings = tp.tokenize(ours, sentences), theirs.encode_batch(sentences)
    np.testing.assert_array_equal(batch.input_ids, [e.ids for e in encodings])
    np.testing.assert_array_equal(batch.attention_mask, [e.attention_mask for e in encodings])
    np.testing.assert_array_equal(batch.token_type_ids, [e.type_ids for e in encodings])
    assert batch.tokens == [list(e.tokens) for e in encodings]
    assert batch.input_ids.shape == (len(sentences), 256)
    # as shipped: every sentence padded and truncated to 128
    shipped = tk.Tokenizer.from_file(str(tp.model_path() / "tokenizer.json"))
    as_file = tp.load_tokenizer(max_length=128, pad_to=128)
    np.testing.assert_array_equal(tp.tokenize(as_file, sentences).input_ids, [e.ids for e in shipped.encode_batch(sentences)])
    assert tp.tokenize(ours, []).input_ids.shape == (0, 0)


def test_the_unicode_tables_are_the_references_for_every_code_point(reference):
    """wordpiece.REFERENCE_UNICODE measured again: for every code point, what the reference's normaliser
    cleans away, strips, lower-cases and splits off, with probe strings of 20,000 code points each."""
    tk = pytest.importorskip("tokenizers")
    norm = tk.normalizers.BertNormalizer
    clean = norm(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = norm(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    lower = norm(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
    split = tk.pre_tokenizers.BertPreTokenizer()
    for start in range(0, 0x110000, 20_000):
        chars = [chr(c) for c in range(start, min(start + 20_000, 0x110000)) if not 0xD800 <= c < 0xE000 and c != 0x7C]
        probe = "|".join(chars)                                   # '|' is kept by every step, and splits
        assert clean.normalize_str(probe) == wp.clean_text(probe), f"clean_text, code points {start:#x}.."
        assert strip.normalize_str(probe) == wp.strip_accents(probe), f"strip_accents, code points {start:#x}.."
        assert lower.normalize_str(probe) == wp.lowercase(probe), f"lowercase, code points {start:#x}.."
        words = "a".join(c for c in chars if not wp.is_whitespace(c))
        theirs = [w for w, _ in split.pre_tokenize_str(words)]
        assert wp.basic_split(words) == theirs, f"basic_split, code points {start:#x}.."


def test_the_tables_list_only_characters_python_reads_otherwise():
    """Each table entry is a character on which Python 3.11's unicodedata says the opposite."""
    t = wp.REFERENCE_UNICODE
    assert all(unicodedata.category(c) == "Cf" for c in t["not_control"])
    assert all(unicodedata.category(c).startswith("P") for c in t["not_punctuation"])
    assert not any(unicodedata.category(c).startswith("P") for c in t["punctuation"])
    assert all(unicodedata.category(c) == "Mn" for c in t["not_mark"]) and unicodedata.category("\u1734") != "Mn"
    assert all(c.lower() == c != low for c, low in t["lower"].items())
    assert sum(map(len, (t["not_control"], t["not_punctuation"], t["not_mark"]))) < 600


def test_greedy_longest_match_first_by_hand():
    vocab = ["[UNK]", "un", "##aff", "##able", "una", "##ff", "a", "##a"]
    assert wp.wordpiece_tokenize("unaffable", vocab).tolist() == [4, 5, 3]       # una ##ff ##able: longest first
    assert wp.wordpiece_tokenize("unaff", vocab).tolist() == [4, 5]
    assert wp.wordpiece_tokenize("unx", vocab).tolist() == [0]                   # one piece missing: the word is [UNK]
    assert wp.wordpiece_tokenize("aaa", vocab).tolist() == [6, 7, 7]
    assert wp.wordpiece_tokenize("a" * 101, vocab).tolist() == [0]              # longer than 100 characters
    assert wp.wordpiece_tokenize("", vocab).tolist() == []
    assert wp.basic_split(wp.normalize("Hello, WORLD!  Ça va?")) == ["hello", ",", "world", "!", "ca", "va", "?"]
    assert wp.lowercase("ΟΔΟΣ") == "οδοσ" != "ΟΔΟΣ".lower()                     # per character: no final sigma


def test_bad_input_is_named(ours):
    with pytest.raises(TypeError, match=r"text must be a str, got int 5"):
        ours.encode(5)
    with pytest.raises(TypeError, match=r"sentences must be a list of strings; wrap a single sentence"):
        ours.encode_batch("one sentence")
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a string, got bytes"):
        ours.encode_batch(["a", b"b"])
    with pytest.raises(TypeError, match=r"word must be a str, got list"):
        wp.wordpiece_tokenize(["a"], ["[UNK]", "a"])
    with pytest.raises(ValueError, match=r"vocab must hold the unknown token '\[UNK\]'"):
        wp.wordpiece_tokenize("a", ["a"])
    with pytest.raises(TypeError, match=r"vocab\[1\] must be a str, got int"):
        wp.wordpiece_tokenize("a", ["[UNK]", 3])
    with pytest.raises(ValueError, match=r"ids must lie in 0..30521, got 30522"):
        ours.id_to_token(30522)
    with pytest.raises(ValueError, match=r"max_length must leave room for \[CLS\] and \[SEP\]"):
        wp.WordPiece(ours.vocab, max_length=1)


def test_a_students_word_function_gives_the_same_ids(ours):
    """WordPiece.with_encode_word hands another function (a student's, which takes the vocabulary as a list) only
    the tokens that can occur in each word, in vocabulary order: the ids must not change."""
    def simple(word, vocab):                    # longest match first, over the list it is given
        if len(word) > 100:
            return [vocab.index("[UNK]")]
        out, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    out.append(vocab.index(piece))
                    start = end
                    break
            else:
                return [vocab.index("[UNK]")]
        return out

    theirs = ours.with_encode_word(simple)
    texts = [t for _, t in tokenizer_strings.varied_strings() if len(t) < 3000][::4]
    mismatches = [t for t in texts if theirs.encode(t, truncate=False).tolist() != ours.encode(t, truncate=False).tolist()]
    assert len(texts) > 400 and not mismatches, f"{len(mismatches)} differ, e.g. {mismatches[:3]}"
