"""Submissions that answer an exercise with another public object of the course package score nothing for that
exercise, through the real grader and its sandbox (as tests/test_grader_private_helper.py does for a private
helper); an honest student graded in the same run gets every autograded point, so the run itself is sound.

Each attacker is the correct submission with one or two solution cells replaced by a call into the package:

* 08, language_model_loss: ``loss.cross_entropy`` of the shifted pair (blocked: the declared twin, TWINS).
* 08, decoder_block: the package's ``TransformerDecoderBlock`` holding the params, its self-attention given the
  student's own ``causal_self_attention`` (the class's cross-attention sub-layer is ``cross_attention`` itself,
  which 08 asks for).
* 08, causal_self_attention: an attention-only, decoder-only ``TransformerDecoderBlock`` (output minus the
  residual; the class's self-attention is ``causal_self_attention`` itself). decoder_block, which calls it,
  fails with it.
* 08, sampling_probabilities: ``generation.keep_top_k`` and ``keep_top_p`` after a softmax (declared twins).
  sample_next_token and generate, which call it, fail with it.
* 07, encoder_layer: ``pretrained.block_from_weights`` (declared twin).
* 09, apply_rope: ``positional.apply_rope`` (04 blocked it only as a twin; the student never wrote it before 09).
* 09, rms_norm: ``transformer_course_fast.FastLlama._rms`` (the row scaling of the fast model, whose gain is folded
  into the next matrix) on a holder made without a model, times the gain (blocked: ``FastLlama`` is declared a
  twin of rms_norm: it is the whole of 09's model written for speed).
* 11, lora_forward: ``LoRAModel.merged_weights`` on a holder made without a model (the merge is the adapted
  layer, ``lora_forward``, applied to the identity).
* 11, kv_head_gradient: ``attention.grouped_query_attention_backward`` with the identity as attention weights,
  whose value gradient is the sum over each group (declared twin).
* 12, bpe_encode and wordpiece_tokenize: the tokenizer classes ``ByteLevelBPE`` and ``WordPiece`` (thin holders:
  they merge and split through the exercises themselves, so the stubs stop them).
* 12, train_bpe: ``bpe.merges_problem``, the visible test's checker, asked merge by merge for the pair it expected
  (a correct answer with the full package: it equals ``bpe.train_bpe``; blocked as train_bpe's declared twin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import correct_class  # noqa: E402
from grader.trusted import supervisor  # noqa: E402

pytestmark = pytest.mark.slow

LOSS = (
    "import transformer_course as tc\n"
    "def language_model_loss(logits, ids):\n"
    "    return tc.loss.cross_entropy(logits[..., :-1, :], ids[..., 1:])\n"
)
BLOCK = (
    "def decoder_block(x, memory, params, n_heads, norm_first=False):\n"
    "    d_model, d_ff = params['W_1'].shape\n"
    "    blk = tc.decoder.TransformerDecoderBlock(d_model, n_heads, d_ff, rng=np.random.default_rng(0),\n"
    "                                            norm_first=norm_first)\n"
    "    keys = ('W_Q', 'W_K', 'W_V', 'W_O', 'b_Q', 'b_K', 'b_V', 'b_O')\n"
    "    blk.self_attention.set_weights(*(params['self_attn'][k] for k in keys))\n"
    "    blk.cross_attention.set_weights(*(params['cross_attn'][k] for k in keys))\n"
    "    blk.feed_forward.set_weights(params['W_1'], params['b_1'], params['W_2'], params['b_2'])\n"
    "    for i in (1, 2, 3):\n"
    "        setattr(blk, f'ln{i}_gamma', params[f'ln{i}_gamma'])\n"
    "        setattr(blk, f'ln{i}_beta', params[f'ln{i}_beta'])\n"
    "    out = blk(x, memory, self_attention=causal_self_attention)     # my own exercise 2\n"
    "    return out.output, out.self_weights, out.cross_weights\n"
)
CAUSAL = (
    "def causal_self_attention(x, params, n_heads, cache=None):\n"
    "    blk = tc.decoder.TransformerDecoderBlock(x.shape[-1], n_heads, rng=np.random.default_rng(0),\n"
    "                                            cross_attention=False, attention_only=True)\n"
    "    blk.self_attention.set_weights(*(params[k] for k in ('W_Q', 'W_K', 'W_V', 'W_O', 'b_Q', 'b_K', 'b_V', 'b_O')))\n"
    "    out = blk(x, cache=None if cache is None else tc.decoder.KVCache(*cache))\n"
    "    return out.output - x, out.self_weights, (out.cache.keys, out.cache.values)\n"
)
SAMPLING = (
    "from transformer_course import generation\n"
    "def sampling_probabilities(logits, *, temperature=1.0, top_k=None, top_p=None):\n"
    "    logits = np.asarray(logits, dtype=float)\n"
    "    if temperature == 0:\n"
    "        return np.eye(logits.shape[-1])[np.argmax(logits, axis=-1)]\n"
    "    probs = softmax(logits / temperature, axis=-1)\n"
    "    for keep, arg in ((generation.keep_top_k, top_k), (generation.keep_top_p, top_p)):\n"
    "        if arg is not None:\n"
    "            probs = np.where(keep(probs, arg), probs, 0.0)\n"
    "            probs = probs / probs.sum(axis=-1, keepdims=True)\n"
    "    return probs\n"
)
ENCODER_LAYER = (
    "from transformer_course.pretrained import block_from_weights\n"
    "def encoder_layer(x, attention_mask, weights, layer, n_heads, eps):\n"
    "    block = block_from_weights(weights, layer, n_heads, eps, dtype=x.dtype)\n"
    "    return block(x, key_padding_mask=np.asarray(attention_mask) != 0)\n"
)
ROPE = (
    "import importlib\n"
    "def apply_rope(x, positions, base=10000.0):\n"
    "    return importlib.import_module('transformer_course.positional').apply_rope(x, positions, base)\n"
)
LORA = (
    "from types import SimpleNamespace\n"
    "from transformer_course import lora\n"
    "def lora_forward(x, W, A, B, scale):\n"
    "    holder = lora.LoRAModel.__new__(lora.LoRAModel)                 # no base model needed\n"
    "    holder.model = SimpleNamespace(embedding=None, final_norm=None, layers=[{'attn_q': W}])\n"
    "    holder.adapters = {lora.adapter_name(0, 'attn_q', 'A'): A, lora.adapter_name(0, 'attn_q', 'B'): B}\n"
    "    holder.scale, holder.pieces = scale, dict(lora.PIECES)\n"
    "    return x @ holder.merged_weights()['blk.0.attn_q.weight'].T\n"
)
RMS = (
    "from transformer_course_fast.llama import FastLlama\n"
    "def rms_norm(x, weight, eps=1e-5):\n"
    "    x = np.asarray(x)\n"
    "    holder = FastLlama.__new__(FastLlama)                        # no model needed\n"
    "    holder.dtype, holder._eps = x.dtype, eps\n"
    "    rows = x.reshape(-1, x.shape[-1])\n"
    "    return (FastLlama._rms(holder, rows) * weight).reshape(x.shape)\n"
)
KV = (
    "from transformer_course import attention\n"
    "def kv_head_gradient(grad_per_query_head, n_kv_heads):\n"
    "    g = np.asarray(grad_per_query_head)\n"
    "    n_heads, n, d = g.shape\n"
    "    zeros = lambda h: np.zeros((h, n, d))                            # noqa: E731\n"
    "    identity = np.broadcast_to(np.eye(n), (n_heads, n, n))          # weights: dv = P^T dO, summed per group\n"
    "    return attention.grouped_query_attention_backward(g, zeros(n_heads), zeros(n_kv_heads), zeros(n_kv_heads),\n"
    "                                                      None, identity)[2]\n"
)

BYTE_LEVEL = (
    "from transformer_course.bpe import ByteLevelBPE\n"
    "def bpe_encode(ids, merges):\n"
    "    tok = ByteLevelBPE(merges)                                         # notebook 12's tokenizer class\n"
    "    return np.asarray(tok.encode_piece(list(ids), tok.ranks))\n"
)
WORDPIECE = (
    "from transformer_course.wordpiece import WordPiece\n"
    "def wordpiece_tokenize(word, vocab):\n"
    "    tok = WordPiece(list(vocab) + ['[CLS]', '[SEP]', '[PAD]'])           # MiniLM's tokenizer class\n"
    "    return tok.encode(word, add_special_tokens=False)\n"
)

MERGES_ORACLE = (
    "import re\nfrom transformer_course import bpe\n"
    'def train_bpe(chunks, n_merges):\n'
    "    merges = []                                     # asks bpe.merges_problem, the visible test's checker, each merge\n"
    '    while len(merges) < n_merges:\n'
    '        said = bpe.merges_problem(chunks, merges, len(merges) + 1)\n'
    '        if said is None:                            # no piece holds two ids any more\n'
    '            break\n'
    '        piece = [int(v) for v in re.findall(r"-?\\d+", said.rsplit(":", 1)[-1])]\n'
    '        probe = (piece[0], piece[1])                # a pair some piece holds\n'
    '        said = bpe.merges_problem(chunks, merges + [probe], len(merges) + 1)\n'
    '        found = re.search(r"expected \\((\\d+), (\\d+)\\)", said or "")\n'
    '        merges.append(probe if found is None else (int(found[1]), int(found[2])))\n'
    '    return np.array(merges, dtype=np.int64).reshape(-1, 2)\n'
)

# student -> (notebook, {solution cell grade_id: new source}, test cells that must fail, a name the details give)
ATTACKERS = {
    "loss_and_block": ("08_decoder", {"language_model_loss": LOSS, "decoder_block": BLOCK},
                       {"test_language_model_loss", "test_decoder_block"}, "cross_entropy"),
    "causal": ("08_decoder", {"causal_self_attention": CAUSAL},
               {"test_causal_self_attention", "test_decoder_block"}, "causal_self_attention"),
    "sampling": ("08_decoder", {"sampling_probabilities": SAMPLING},
                 {"test_sampling_probabilities", "test_sample_next_token", "test_generate"}, "keep_top_k"),
    "minilm_loader": ("07_pretrained_minilm", {"encoder_layer": ENCODER_LAYER}, {"test_encoder_layer"},
                      "block_from_weights"),
    "rope": ("09_llm", {"apply_rope": ROPE}, {"test_apply_rope"}, "apply_rope"),
    "fast_rms": ("09_llm", {"rms_norm": RMS}, {"test_rms_norm"}, "FastLlama"),
    "lora_merge": ("11_finetune", {"lora_forward": LORA}, {"test_lora_forward"}, "lora_forward"),
    "kv_sum": ("11_finetune", {"kv_head_gradient": KV}, {"test_kv_head_gradient"}, "grouped_query_attention_backward"),
    "tokenizer_classes": ("12_tokens", {"bpe_encode": BYTE_LEVEL, "wordpiece_tokenize": WORDPIECE},
                          {"test_bpe_encode", "test_wordpiece_tokenize"}, "bpe_encode"),
    "merges_oracle": ("12_tokens", {"train_bpe": MERGES_ORACLE}, {"test_train_bpe"}, "merges_problem"),
}
NOTEBOOKS = sorted({nb for nb, *_ in ATTACKERS.values()})


def _attack(notebook: str, cells: dict[str, str]) -> dict:
    nb = correct_class.correct_submission(notebook)
    for grade_id, source in cells.items():
        cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
        cell["source"] = source.splitlines(keepends=True)
    return nb


def test_answering_with_a_package_object_scores_nothing_for_that_exercise(tmp_path):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    submissions = {("honest", nb): correct_class.correct_submission(nb) for nb in NOTEBOOKS}
    submissions |= {(student, nb): _attack(nb, cells) for student, (nb, cells, _, _) in ATTACKERS.items()}
    for (student, nb), content in submissions.items():
        path = tmp_path / "submitted" / student / nb / f"{nb}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(content), encoding="utf-8")
    env = dict(os.environ, COURSE_GRADING_SEED="20261205")
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--submitted", str(tmp_path / "submitted"),
                          "--grades", str(tmp_path / "grades"), *(a for nb in NOTEBOOKS for a in ("--assignment", nb)),
                          "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = {(s, nb): json.loads((tmp_path / "grades" / "results" / s / f"{nb}.json").read_text())
               for s, nb in submissions}
    for nb in NOTEBOOKS:
        honest = records["honest", nb]
        assert all(t["passed"] for t in honest["tests"]), (nb, honest["tests"], honest["details"])
        assert honest["auto_points"] == sum(t["max_points"] for t in honest["tests"]) > 0
    for student, (nb, _, must_fail, named) in ATTACKERS.items():
        r = records[student, nb]
        passed = {t["grade_id"]: t["passed"] for t in r["tests"]}
        assert {g for g, ok in passed.items() if not ok} == must_fail, (student, passed, r["details"])
        lost = sum(t["max_points"] for t in r["tests"] if t["grade_id"] in must_fail)
        assert r["auto_points"] == records["honest", nb]["auto_points"] - lost, (student, r["auto_points"])
        assert named in json.dumps(r), (student, r["details"])       # the stub's message names what it blocks
