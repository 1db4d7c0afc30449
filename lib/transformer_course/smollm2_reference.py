"""The reference the NumPy SmolLM2 is checked against: transformers reading the same GGUF file.

Needs the test extras (torch, transformers, accelerate, gguf; requirements/test-lock.txt).
transformers dequantises the file to float (bit for bit what ``gguf`` gives), un-permutes W_Q and
W_K to its half-split RoPE, and runs its own LlamaForCausalLM on PyTorch.

transformers' float64 Llama is not float64 throughout: RMSNorm computes in float32 and casts
back, and the RoPE cos/sin tables come from float32 angles. :func:`load_torch_smollm2` with
``exact_float64=True`` replaces those two pieces by float64 versions of the same formulas (and
uses SDPA attention, whose softmax keeps the input dtype), so that float64 can be compared at
rounding level; tests/test_smollm2.py checks both.

Regenerate the stored reference used by notebook 09 (no torch needed to run the notebook)::

    python -m transformer_course.smollm2_reference --write-reference
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

from .smollm2 import MODEL_FILE, smollm2_path

REFERENCE_FILE = Path(__file__).with_name("smollm2_reference.npz")
# Prompts whose logits and greedy continuations the notebook compares with the stored reference.
REFERENCE_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "Water boils at",
)
N_GREEDY = 30


def _rms_norm_float64(self, hidden_states):
    import torch

    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_float64(self, x, position_ids):
    import torch

    dim = self.inv_freq.numel() * 2
    inv_freq = 1.0 / (self.config.rope_parameters["rope_theta"]
                      ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].to(torch.float64) * inv_freq           # (batch, n, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def load_torch_smollm2(dtype="float32", exact_float64: bool = True):
    """transformers' LlamaForCausalLM and tokenizer from the package's GGUF file (eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_path().parent
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[str(np.dtype(dtype))]
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=MODEL_FILE, dtype=torch_dtype,
                                                 attn_implementation="sdpa")
    model.eval()
    if torch_dtype == torch.float64 and exact_float64:
        for module in model.modules():
            name = type(module).__name__
            if name == "LlamaRMSNorm":
                module.forward = types.MethodType(_rms_norm_float64, module)
            elif name == "LlamaRotaryEmbedding":
                module.forward = types.MethodType(_rotary_float64, module)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=MODEL_FILE)
    return model, tokenizer


def reference_logits(model, ids) -> np.ndarray:
    """Logits ``(n, V)`` for one sequence of ids, in the model's dtype."""
    import torch

    with torch.no_grad():
        out = model(torch.as_tensor(np.asarray(ids)[None], dtype=torch.long))
    return out.logits[0].numpy()


def reference_greedy(model, ids, n_new: int) -> np.ndarray:
    """Greedy continuation with transformers' own loop and cache (``generate``)."""
    import torch

    # No end-of-sequence stop: the file names <|im_start|> (id 1) as EOS, and the NumPy loop
    # never stops early either; both must produce exactly n_new tokens.
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.as_tensor(np.asarray(ids)[None], dtype=torch.long), max_new_tokens=n_new,
                             do_sample=False, pad_token_id=0)
    ids_out = out[0].numpy()
    assert ids_out.size == len(ids) + n_new, ids_out.size
    return ids_out


def write_reference(path: Path = REFERENCE_FILE) -> None:
    """Store, for REFERENCE_PROMPTS, the float32 reference's ids, greedy continuation and its
    last-position logits on a fixed sample of the vocabulary (4096 random ids plus each prompt's 8
    largest: the whole row would be 49,152 floats per prompt)."""
    model, tokenizer = load_torch_smollm2("float32")
    ids = [np.array(tokenizer(prompt)["input_ids"], dtype=np.int64) for prompt in REFERENCE_PROMPTS]
    last = [reference_logits(model, i)[-1] for i in ids]
    sample = np.random.default_rng(0).choice(len(last[0]), size=4096, replace=False)
    sample = np.unique(np.concatenate([sample] + [np.argsort(-row)[:8] for row in last]))
    arrays = {"prompts": np.array(REFERENCE_PROMPTS), "vocab_sample": sample}
    for k, (i, row) in enumerate(zip(ids, last)):
        arrays[f"ids_{k}"] = i
        arrays[f"last_logits_{k}"] = row[sample].astype(np.float32)
        arrays[f"greedy_{k}"] = reference_greedy(model, i, N_GREEDY).astype(np.int64)
    np.savez_compressed(path, **arrays)


def read_reference(path: Path = REFERENCE_FILE) -> dict:
    """The stored reference: ``prompts``, ``vocab_sample`` and per prompt k ``ids_k``,
    ``last_logits_k`` (on ``vocab_sample``) and ``greedy_k`` (prompt + N_GREEDY tokens)."""
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


# The earlier name (pretrained.load_reference is MiniLM's stored reference; this loads the torch model).
load_reference = load_torch_smollm2


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-reference"]:
        write_reference()
        print(f"wrote {REFERENCE_FILE}")
    else:
        print(__doc__)
