"""What the reference tokenizers give for a set of strings, stored so notebook 12 compares without them.

The references are the libraries the course's tokenizers are checked against (tests/test_bpe.py and
tests/test_wordpiece.py run them live on 2,264 strings): SmolLM2's own tokenizer (its Hugging Face
pipeline, ``Digits(individual_digits=True)`` then ``ByteLevel``, run by ``tokenizers`` from the GGUF
file's vocabulary and merges), transformers' tokenizer of the same GGUF file (which splits like plain
GPT-2), and all-MiniLM-L6-v2's ``tokenizer.json`` run by ``tokenizers``. Needs the test extras
(requirements/test-lock.txt) to regenerate::

    python -m transformer_course.tokens_reference --write-reference
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from .texts import ARTICLE_1

REFERENCE_FILE = Path(__file__).with_name("tokens_reference.npz")
CONTROL = 3                                   # tokenizer.ggml.token_type of a control token

# Strings of every kind the course's tests check, a few of each (bytes SmolLM2 has no token for excluded:
# the references drop them silently, the course refuses them unless asked to drop).
STRINGS = (
    *ARTICLE_1.values(),
    "The capital of France is", "The capital of France is ", " Paris", "Paris", "unbelievably", " tokenization",
    "In 1945, a computer filled a room.", "a  1", "x   42", "\t\t7", "\n\n1. First", "Step  2:  3 apples", "½ ² ³",
    "12345 + 678 = 13023", "2026-11-19 12:34:56", "3.14159265358979", "1,234,567.89", "٣٤٥ १२३ １２３",
    "def f(x):\n    return x ** 2\n", "for i in range(10):\n\tprint(i)  # comment", "if (a &&b) { return -1; }",
    "  leading and trailing  ", "tabs\tand\nnewlines\r\nand\u00a0no-break\u3000spaces", "\n\n\n", "",
    "😀 👍🏽 🇫🇷 👨‍👩‍👧 1️⃣ 🦄", "naïve café, Zürich, İstanbul, ΟΔΟΣ, Øresund", "Hello [SEP] world [sep] [MASK]",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|im_", "flibbertigibbetous",
    "Supercalifragilisticexpialidocious", "antidisestablishmentarianism", "GPT-2's tokenizer doesn't split",
    "a" * 300, "!!!???...", "https://example.org/path?q=1&r=2", "x² + y³ = z⁴", "Ⅻ ① ⅔",
)


def compute_tokens_reference(strings=STRINGS) -> dict:
    """Run the three reference tokenizers on ``strings`` (needs tokenizers, transformers, gguf)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import tokenizers as tk
    import transformers

    from .pretrained import minilm_path
    from .smollm2 import read_smollm2_gguf, smollm2_path

    meta = read_smollm2_gguf().metadata
    tokens = meta["tokenizer.ggml.tokens"]
    original = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                          merges=[tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]))
    original.pre_tokenizer = tk.pre_tokenizers.Sequence([
        tk.pre_tokenizers.Digits(individual_digits=True),
        tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    original.add_special_tokens([tk.AddedToken(tokens[i], normalized=False, special=True)
                                 for i, t in enumerate(meta["tokenizer.ggml.token_type"]) if t == CONTROL])
    path = smollm2_path()
    transformers.logging.set_verbosity_error()
    hf = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    minilm = tk.Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    minilm.no_padding()
    minilm.no_truncation()
    out = {"strings": np.array(strings, dtype=str)}
    for name, run in (("smollm2", lambda s: original.encode(s).ids), ("transformers", lambda s: hf(s)["input_ids"]),
                      ("minilm", lambda s: minilm.encode(s).ids)):
        ids = [run(s) for s in strings]
        out[f"{name}_ids"] = np.array([i for row in ids for i in row], dtype=np.int64)
        out[f"{name}_offsets"] = np.cumsum([0] + [len(row) for row in ids]).astype(np.int64)
    return out


def read_tokens_reference(file=REFERENCE_FILE) -> dict:
    """{"strings": [...], "smollm2": [ids per string], "transformers": [...], "minilm": [...]} from the
    stored file (no tokenizer library needed)."""
    with np.load(file) as data:
        out = {"strings": [str(s) for s in data["strings"]]}
        for name in ("smollm2", "transformers", "minilm"):
            ids, offsets = data[f"{name}_ids"], data[f"{name}_offsets"]
            out[name] = [ids[a:b].copy() for a, b in zip(offsets[:-1], offsets[1:])]
    return out


def _main(argv) -> int:
    if argv != ["--write-reference"]:
        print("usage: python -m transformer_course.tokens_reference --write-reference", file=sys.stderr)
        return 2
    ref = compute_tokens_reference()
    np.savez_compressed(REFERENCE_FILE, **ref)
    print(f"wrote {REFERENCE_FILE} ({REFERENCE_FILE.stat().st_size // 1024} KiB): {len(ref['strings'])} strings")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
