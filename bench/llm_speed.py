"""SmolLM2-135M decoding against the machine's limit (`make bench-llm`).

A decode step at batch 1 multiplies one vector by every weight matrix once, so it must read all
the weights from memory: 538 MB per token in float32. The fastest a float32 decoder can go is the
time the machine takes to stream those bytes -- the *bound*. This script measures the bound and the
decoders in the same run, for one and for two threads:

* **bound, GEMV**: OpenBLAS matrix-vector products over the model's own 211 matrices (float32, in
  the fast decoder's layout), nothing else -- one pass is one token's weights;
* **bound, plain read**: ``np.sum`` over a 512 MiB float32 array (split among Python threads);
* **NumPy**: ``transformer_course_fast.FastLlama`` and the readable ``transformer_course.llama.Llama``;
* **PyTorch**: transformers' ``LlamaForCausalLM`` (eager PyTorch) on the same GGUF weights, as a loop
  of forward calls with its ``DynamicCache`` and as ``generate()`` (greedy);
* **llama.cpp** (optional: ``pip install llama-cpp-python``, a source build): the same GGUF file as
  stored (Q4_1 matrices, Q8_0 embedding), and the same weights re-stored as Q8_0 and as F32 with
  ``llama_model_quantize`` (in a temporary folder).

Decode: one token at a time with the KV cache after a 32-token prompt, ``--steps`` steps, each timed;
the per-process figure is the median step. Prefill: a 256-token prompt into an empty cache (all
logits). The bound, the fast and the readable decoder alternate inside one NumPy process (so the
share of the bound compares numbers taken seconds apart); PyTorch and llama.cpp run in processes of
their own (thread pools disturb each other). The processes rotate their order, ``--reps`` times per
thread count; every figure is the median over processes. Threads are set in the environment
(``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``) before the libraries start; the load average is
printed with every process.

* **speculative decoding** (``llm_speculation.py``): FastLlama and the readable Llama decoding grounded and free
  prompts plainly and with prompt lookup (``transformer_course.speculative``), side by side; float32 tokens
  compared with plain decoding's in the same processes, float64 tokens in a process of their own.

Writes ``bench/results/llm_speed.{txt,json,md,png}`` and the table in bench/README.md.

    .venv/bin/python bench/llm_speed.py                  # full run, ~8 min
    .venv/bin/python bench/llm_speed.py --quick --out /tmp/x --without-torch --without-llamacpp
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
README = os.path.join(HERE, "README.md")
README_START, README_END = "<!-- llm-table:start -->", "<!-- llm-table:end -->"
PROMPT, LONG_PROMPT = 32, 256
READ_BYTES = 512 * 2**20
# Bars (issue 30): fast decoder >= 85 % of the GEMV bound on one thread, >= 1.5x transformers eager;
# (issue 42) the readable Llama within 1.3x of FastLlama's ms/token on one thread.
TARGET_SHARE, TARGET_SPEEDUP, TARGET_READABLE = 0.85, 1.5, 1.3
LLAMACPP_FORMATS = ("Q4_1", "Q8_0", "F32")    # the file as stored, then re-stored by llama.cpp


def prompt_ids(n, seed=0):
    import numpy as np

    return np.random.default_rng(seed).integers(1000, 20000, size=n)


def median(xs):
    return statistics.median(xs) if xs else None


def decode_times(step, first_token, steps, cpu=None):
    """Time ``steps`` greedy steps one by one; ``step(token) -> next token``. Wall seconds per step;
    the process's CPU seconds per step are appended to ``cpu`` if given (with one thread, the
    figure a busy machine disturbs least: waiting for a core is not counted)."""
    token, times = first_token, []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        token = step(token)
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return times


def load_avg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# Workers (each in its own process)
# ---------------------------------------------------------------------------------------------
def worker_numpy(args):
    """Bound (GEMV, plain read), FastLlama and the readable Llama, alternating, ``args.rounds`` times."""
    import concurrent.futures

    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course_fast.llama import load_fast_smollm2

    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    t0 = time.perf_counter()
    fast, lm = load_fast_smollm2(dtype=np.float32)
    load = time.perf_counter() - t0
    readable = lm.model
    mats = fast.matrices()
    inputs = {W.shape[0]: np.random.default_rng(1).standard_normal(W.shape[0]).astype(np.float32) for W in mats}
    outputs = {W.shape[1]: np.empty(W.shape[1], np.float32) for W in mats}
    block = np.ones(READ_BYTES // 4, np.float32)
    parts = np.array_split(block, threads)
    pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None

    def gemv_pass(cpu=None):
        c, t = time.process_time(), time.perf_counter()
        for W in mats:
            np.dot(inputs[W.shape[0]], W, out=outputs[W.shape[1]])
        if cpu is not None:
            cpu.append(time.process_time() - c)
        return time.perf_counter() - t

    def read_pass():
        t = time.perf_counter()
        if pool is None:
            block.sum()
        else:
            list(pool.map(np.sum, parts))
        return time.perf_counter() - t

    def decoder_times(kind):
        prompt = prompt_ids(PROMPT)
        if kind == "fast":
            cache = fast.new_cache(PROMPT + args.steps + 2)
            first = int(np.argmax(fast.forward(prompt, cache, last_only=True)))
            step = lambda tok: int(np.argmax(fast.decode_step(tok, cache)))           # noqa: E731
        else:
            cache = readable.new_cache(PROMPT + args.steps + 2)
            first = int(np.argmax(readable.forward(prompt, cache)[-1]))
            step = lambda tok: int(np.argmax(readable.forward(np.array([tok]), cache)[-1]))   # noqa: E731
        first = step(first)                                                         # warm-up
        cpu = []
        times = decode_times(step, first, args.steps, cpu)
        out[f"{kind}_cpu"].append(statistics.median(cpu))
        long = prompt_ids(args.prefill, 1)
        model = fast if kind == "fast" else readable
        t = time.perf_counter()
        model.forward(long, model.new_cache(args.prefill))
        return statistics.median(times), time.perf_counter() - t

    out = {k: [] for k in ("gemv", "read", "fast", "readable", "fast_prefill", "readable_prefill",
                           "gemv_cpu", "fast_cpu", "readable_cpu")}
    gemv_pass(), read_pass()                                                        # warm-up
    for r in range(args.rounds):
        cpu = []
        out["gemv"].append(statistics.median(gemv_pass(cpu) for _ in range(args.bound_passes)))
        out["gemv_cpu"].append(statistics.median(cpu))
        out["read"].append(statistics.median(read_pass() for _ in range(args.bound_passes)))
        for kind in (("fast", "readable") if r % 2 == 0 else ("readable", "fast")):
            decode, prefill = decoder_times(kind)
            out[kind].append(decode)
            out[f"{kind}_prefill"].append(prefill)
    # greedy agreement on this prompt: the same tokens from both decoders
    agree = bool(np.array_equal(fast.generate_greedy(prompt_ids(8), 8), readable.generate_greedy(prompt_ids(8), 8)))
    return {"medians": {k: median(v) for k, v in out.items()}, "load_s": load, "greedy_equal": agree,
            "f32_bytes": fast.weight_bytes_per_token, "read_bytes": block.nbytes,
            "n_matrices": len(mats), "threads": threads}


def worker_torch(args):
    """transformers' LlamaForCausalLM on PyTorch (eager): a forward loop and generate(), alternating."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.path.insert(0, os.path.join(ROOT, "lib"))
    import torch
    from transformers import DynamicCache

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from transformer_course.smollm2_reference import load_reference

    t0 = time.perf_counter()
    model, _ = load_reference("float32")
    model.generation_config.eos_token_id = None          # exactly n new tokens, as the other decoders
    load = time.perf_counter() - t0
    prompt = torch.as_tensor(prompt_ids(PROMPT)[None], dtype=torch.long)
    out = {"loop": [], "generate": [], "prefill": [], "loop_cpu": []}

    def loop_times():
        cache = DynamicCache(config=model.config)
        first = int(model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[0, -1].argmax())

        def step(token):
            logits = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True).logits
            return int(logits[0, -1].argmax())

        cpu = []
        wall = statistics.median(decode_times(step, step(first), args.steps, cpu))
        out["loop_cpu"].append(statistics.median(cpu))
        return wall

    def generate_seconds(n_new):
        t = time.perf_counter()
        model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n_new,
                       min_new_tokens=n_new, do_sample=False, temperature=None, top_p=None, top_k=None,
                       pad_token_id=0)
        return time.perf_counter() - t

    with torch.inference_mode():
        generate_seconds(2)                                                          # warm-up
        for r in range(args.rounds):
            for kind in (("loop", "generate") if r % 2 == 0 else ("generate", "loop")):
                if kind == "loop":
                    out["loop"].append(loop_times())
                else:   # per token: (n new tokens - 1 new token) / (n - 1): the prompt's prefill cancels
                    out["generate"].append((generate_seconds(args.steps + 1) - generate_seconds(1)) / args.steps)
            long = torch.as_tensor(prompt_ids(args.prefill, 1)[None], dtype=torch.long)
            t = time.perf_counter()
            model(input_ids=long, past_key_values=DynamicCache(config=model.config), use_cache=True)
            out["prefill"].append(time.perf_counter() - t)
    return {"medians": {k: median(v) for k, v in out.items()}, "load_s": load, "threads": torch.get_num_threads()}


def worker_llamacpp(args):
    """llama.cpp (llama-cpp-python) on each GGUF file in ``args.gguf``: decode and prefill."""
    import numpy as np
    from llama_cpp import Llama

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    result = {"medians": {}, "threads": threads, "version": __import__("llama_cpp").__version__}
    for fmt, path in json.loads(args.gguf).items():
        llm = Llama(model_path=path, n_ctx=max(PROMPT + args.steps + 8, args.prefill + 8), n_batch=512,
                    n_threads=threads, n_threads_batch=threads, verbose=False)

        n_vocab = llm.n_vocab()

        def last_logits():   # logits_all=False: llama.cpp keeps the last token's row only
            return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

        def step(token):
            llm.eval([token])
            return int(np.argmax(last_logits()))

        decode, prefill = [], []
        for _ in range(args.rounds):
            llm.reset()
            llm.eval(prompt_ids(PROMPT).tolist())
            first = step(int(np.argmax(last_logits())))
            decode.append(statistics.median(decode_times(step, first, args.steps)))
            llm.reset()
            t = time.perf_counter()
            llm.eval(prompt_ids(args.prefill, 1).tolist())
            prefill.append(time.perf_counter() - t)
        result["medians"][fmt] = median(decode)
        result["medians"][f"{fmt}_prefill"] = median(prefill)
        del llm
    return result


sys.path.insert(0, HERE)
import llm_speculation  # noqa: E402  (the speculative decoding rows; beside this file)

WORKERS = {"numpy": worker_numpy, "torch": worker_torch, "llamacpp": worker_llamacpp,
           "spec": llm_speculation.worker_spec, "float64": llm_speculation.worker_float64}


# ---------------------------------------------------------------------------------------------
# Storage formats: bytes read per token
# ---------------------------------------------------------------------------------------------
def storage_bytes(f32_bytes: int) -> dict:
    """Weight bytes one decode step reads, per storage format: every matrix and the tied head once
    (norm gains are a few kB). Q4_1: 20 bytes per 32 weights, Q8_0: 34 per 32 (llama.cpp's
    blocks); "GGUF file" is the file as shipped (Q4_1 matrices, Q8_0 embedding/head)."""
    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course import smollm2

    contents = smollm2.read_gguf()
    as_stored = sum(raw.nbytes for name, raw in contents.raw.items() if contents.kinds[name] != "F32")
    n = f32_bytes // 4
    return {"F64": 2 * f32_bytes, "F32": f32_bytes, "Q8_0": n * 34 // 32, "Q4_1": as_stored}


@contextlib.contextmanager
def _quiet_stderr():
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def requantized_files(folder: str, ftypes=("Q8_0", "F32")) -> dict:
    """The package's GGUF file re-stored by llama.cpp's quantizer; ``{format: path}``."""
    import ctypes

    import llama_cpp

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course import smollm2

    source = str(smollm2.model_path())
    files = {"Q4_1": source}
    codes = {"Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "F32": llama_cpp.LLAMA_FTYPE_ALL_F32}
    for fmt in ftypes:
        path = os.path.join(folder, f"smollm2-{fmt}.gguf")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = codes[fmt]
        params.allow_requantize = True
        params.nthread = 2
        with _quiet_stderr():                      # llama.cpp logs every tensor to fd 2
            rc = llama_cpp.llama_model_quantize(source.encode(), path.encode(), ctypes.byref(params))
        if rc == 0:
            files[fmt] = path
    return files


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------
def run_worker(kind, args, threads, gguf=None):
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(args.steps),
           "--rounds", str(args.spec_rounds if kind == "spec" else args.rounds),
           "--prefill", str(args.prefill), "--bound-passes", str(args.bound_passes), "--spec-tokens", str(args.spec_tokens)]
    if args.spec_prompts:
        cmd += ["--spec-prompts", args.spec_prompts]
    if gguf:
        cmd += ["--gguf", json.dumps(gguf)]
    before = load_avg()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if "Error" in ln or "error" in ln]
        return None, f"exit code {proc.returncode}: " + (lines[-1] if lines else proc.stderr.strip()[-300:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_avg"] = [before, load_avg()]
    return result, None


def summarize(runs: dict, f32_bytes: int) -> dict:
    """Medians over processes, per thread count: ``{threads: {row: seconds}}``, and derived rates."""
    summary = {}
    for threads, by_kind in runs.items():
        rows = {}
        for kind, results in by_kind.items():
            keys = {k for r in results for k in r["medians"]}
            for k in keys:
                vals = [r["medians"][k] for r in results if r["medians"].get(k) is not None]
                if vals:
                    rows[f"{kind}:{k}"] = median(vals)
        summary[threads] = rows
    return summary


ROW_LABELS = [  # (key, label, storage)
    ("numpy:fast", "NumPy `FastLlama` (transformer_course_fast)", "F32"),
    ("numpy:readable", "NumPy `Llama` (readable, notebook 09)", "F32"),
    ("torch:loop", "transformers eager, forward loop", "F32"),
    ("torch:generate", "transformers eager, `generate()`", "F32"),
    ("llamacpp:F32", "llama.cpp, F32 file", "F32"),
    ("llamacpp:Q8_0", "llama.cpp, Q8_0 file", "Q8_0"),
    ("llamacpp:Q4_1", "llama.cpp, the GGUF file as shipped (Q4_1 + Q8_0)", "Q4_1"),
]
FORMAT_LABELS = {"F64": "float64", "F32": "float32", "Q8_0": "Q8_0", "Q4_1": "GGUF file (Q4_1 + Q8_0 head)"}


def table(summary, formats, threads_list, prefill=LONG_PROMPT) -> tuple[str, list, list]:
    """Markdown tables (decoders; bounds per format), and the target lines."""
    lines = ["| decoder | storage | threads | ms/token | tokens/s | bound tokens/s (GEMV) | share of bound | "
             f"x transformers loop | prefill {prefill} (s) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    bounds = ["| storage | MB read per token | threads | bound tokens/s from GEMV | from plain read |",
              "|---|---:|---:|---:|---:|"]
    checks = []
    for t in threads_list:
        s = summary.get(t, {})
        gemv, read = s.get("numpy:gemv"), s.get("numpy:read")
        if gemv is None:
            continue
        bw_gemv, bw_read = formats["F32"] / gemv, READ_BYTES / read
        for fmt, nbytes in formats.items():
            bounds.append(f"| {FORMAT_LABELS[fmt]} | {nbytes / 1e6:.1f} | {t} | {bw_gemv / nbytes:.1f} | {bw_read / nbytes:.1f} |")
        bounds.append(f"| (bandwidth, GB/s) | | {t} | {bw_gemv / 1e9:.1f} | {bw_read / 1e9:.1f} |")
        loop = s.get("torch:loop")
        for key, label, fmt in ROW_LABELS:
            sec = s.get(key)
            if sec is None:
                continue
            bound = bw_gemv / formats[fmt]
            prefill = s.get(f"{key}_prefill") if not key.startswith("torch") else (
                s.get("torch:prefill") if key == "torch:loop" else None)
            speed = "—" if loop is None else f"{loop / sec:.2f}"
            lines.append(f"| {label} | {FORMAT_LABELS[fmt]} | {t} | {sec * 1e3:.1f} | {1 / sec:.1f} | {bound:.1f} | "
                         f"{100 / sec / bound:.0f} % | {speed} | {'—' if prefill is None else f'{prefill:.2f}'} |")
        fast = s.get("numpy:fast")
        if fast is not None:
            share = gemv / fast
            if t == 1:
                checks.append(f"- FastLlama, 1 thread: {100 * share:.0f} % of the same run's GEMV bound "
                              f"(target >= {100 * TARGET_SHARE:.0f} %): {'met' if share >= TARGET_SHARE else 'NOT met'}")
            if loop is not None:
                x = loop / fast
                checks.append(f"- FastLlama, {t} thread(s): {x:.2f}x the tokens/s of transformers eager (loop) "
                              f"(target >= {TARGET_SPEEDUP}x): {'met' if x >= TARGET_SPEEDUP else 'NOT met'}")
            cpu_fast, cpu_gemv, cpu_loop = s.get("numpy:fast_cpu"), s.get("numpy:gemv_cpu"), s.get("torch:loop_cpu")
            if t == 1 and cpu_fast and cpu_gemv:
                checks.append(f"- the same by CPU time per token (1 thread; what a busy machine disturbs least): "
                              f"FastLlama {cpu_fast * 1e3:.1f} ms, GEMV pass {cpu_gemv * 1e3:.1f} ms: "
                              f"{100 * cpu_gemv / cpu_fast:.0f} % of the bound" + (
                                  f"; transformers loop {cpu_loop * 1e3:.1f} ms: {cpu_loop / cpu_fast:.2f}x"
                                  if cpu_loop else ""))
            readable = s.get("numpy:readable")
            if readable is not None:
                x = readable / fast
                checks.append(f"- readable Llama, {t} thread(s): {readable * 1e3:.1f} ms/token "
                              f"({100 * gemv / readable:.0f} % of the bound); FastLlama {x:.2f}x faster" + (
                                  f" (target <= {TARGET_READABLE}x on one thread): {'met' if x <= TARGET_READABLE else 'NOT met'}"
                                  if t == 1 else ""))
    return "\n".join(lines), bounds, checks


def plot(summary, formats, threads_list, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fmts = list(formats)
    fig, axes = plt.subplots(1, len(threads_list), figsize=(6.2 * len(threads_list), 4.6), sharey=True, squeeze=False)
    markers = {"numpy:fast": ("o", "C0"), "numpy:readable": ("s", "C1"), "torch:loop": ("^", "C2"),
               "torch:generate": ("v", "C2"), "llamacpp:F32": ("D", "C3"), "llamacpp:Q8_0": ("D", "C3"),
               "llamacpp:Q4_1": ("D", "C3")}
    for ax, t in zip(axes[0], threads_list):
        s = summary.get(t, {})
        if s.get("numpy:gemv") is None:
            continue
        bw_gemv, bw_read = formats["F32"] / s["numpy:gemv"], READ_BYTES / s["numpy:read"]
        xs = range(len(fmts))
        ax.bar([x - 0.2 for x in xs], [bw_gemv / formats[f] for f in fmts], 0.4, color="0.75",
               label=f"bound: GEMV stream ({bw_gemv / 1e9:.1f} GB/s)")
        ax.bar([x + 0.2 for x in xs], [bw_read / formats[f] for f in fmts], 0.4, color="0.88",
               label=f"bound: plain read ({bw_read / 1e9:.1f} GB/s)")
        seen = set()
        for key, label, fmt in ROW_LABELS:
            if s.get(key) is None:
                continue
            marker, color = markers[key]
            offset = {"numpy:readable": -0.1, "torch:loop": 0.1, "torch:generate": 0.2}.get(key, 0.0)
            name = label.split(",")[0] if key.startswith("llamacpp") else label
            ax.plot(fmts.index(fmt) + offset, 1 / s[key], marker, color=color, ms=8,
                    mfc=color if key != "torch:generate" else "white", label=None if name in seen else name)
            seen.add(name)
        ax.set_xticks(list(xs), [FORMAT_LABELS[f].replace(" (", "\n(") for f in fmts])
        ax.set_yscale("log")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}: tokens/s against the bound")
        ax.set_xlabel("storage of the weights (bytes read per token fall to the right)")
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0][0].set_ylabel("tokens/s (decode, batch 1)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replace_block(path, block) -> bool:
    """Put ``block`` between the README's llm markers; False if they are missing."""
    with open(path) as f:
        text = f.read()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    with open(path, "w") as f:
        f.write(f"{head}{README_START}\n{block}\n{README_END}{rest.split(README_END, 1)[1]}")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3, help="processes per kind and thread count (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations inside each process (default 3)")
    parser.add_argument("--steps", type=int, default=48, help="timed decode steps per round (default 48)")
    parser.add_argument("--prefill", type=int, default=LONG_PROMPT, help="prefill length (default 256)")
    parser.add_argument("--bound-passes", type=int, default=7, help="GEMV / read passes per round (default 7)")
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 process, 1 round, 4 steps, 1 thread")
    parser.add_argument("--spec-reps", type=int, default=2,
                        help="speculative-decoding processes per thread count (default 2; 0: none)")
    parser.add_argument("--spec-rounds", type=int, default=1, help="rounds inside each of them (default 1)")
    parser.add_argument("--spec-tokens", type=int, default=128, help="most new tokens per prompt (default 128)")
    parser.add_argument("--spec-prompts", help="comma-separated prompt names (default all: "
                                               f"{','.join(llm_speculation.PROMPTS)})")
    parser.add_argument("--without-float64", action="store_true", help="skip the float64 token comparison")
    parser.add_argument("--without-torch", action="store_true")
    parser.add_argument("--without-llamacpp", action="store_true")
    parser.add_argument("--out", help="folder for llm_speed.{txt,json,md,png} (default bench/results; "
                                      "the README is updated only for the default)")
    parser.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--gguf", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return 0
    if args.quick:
        args.reps, args.rounds, args.steps, args.prefill, args.bound_passes, args.threads = 1, 1, 4, 16, 2, "1"
        args.spec_reps, args.spec_rounds, args.spec_tokens = 1, 1, 6
        args.spec_prompts = args.spec_prompts or "list,tips"
        args.without_float64 = True
    threads_list = [int(t) for t in args.threads.split(",")]
    out_dir = args.out or RESULTS
    os.makedirs(out_dir, exist_ok=True)
    report = []

    def say(line=""):
        print(line, flush=True)
        report.append(line)

    kinds = ["numpy"]
    skipped = []
    if args.without_torch:
        skipped.append("transformers (--without-torch)")
    elif all(importlib.util.find_spec(m) for m in ("torch", "transformers", "accelerate", "gguf")):
        kinds.append("torch")
    else:
        skipped.append("transformers (torch/transformers/accelerate/gguf not installed)")
    tmp = contextlib.ExitStack()
    gguf = None
    if args.without_llamacpp:
        skipped.append("llama.cpp (--without-llamacpp)")
    elif importlib.util.find_spec("llama_cpp") is None:
        skipped.append("llama.cpp (llama-cpp-python not installed: `pip install llama-cpp-python`, a source build)")
    else:
        folder = tmp.enter_context(tempfile.TemporaryDirectory(prefix="llm_speed_"))
        gguf = requantized_files(folder, () if args.quick else ("Q8_0", "F32"))
        kinds.append("llamacpp")
    say(f"SmolLM2-135M decode, batch 1: {args.steps} steps after a {PROMPT}-token prompt, prefill {args.prefill}; "
        f"{args.reps} process(es) per kind and thread count, {args.rounds} round(s) each; "
        f"started {time.strftime('%Y-%m-%d %H:%M')}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for s in skipped:
        say(f"skipped: {s}")
    runs = {t: {k: [] for k in kinds} for t in threads_list}
    spec_runs = {t: [] for t in threads_list}
    with tmp:
        for t in threads_list:
            for rep in range(args.spec_reps):
                result, error = run_worker("spec", args, t)
                if result is None:
                    say(f"{t} thread(s) speculative decoding rep {rep + 1}: worker failed: {error}")
                    return 1
                spec_runs[t].append(result)
                say(f"{t} thread(s) rep {rep + 1} spec     load avg {result['load_avg'][0]:.2f}->"
                    f"{result['load_avg'][1]:.2f}: " + ", ".join(
                        f"{k} {statistics.median(r['wall'] for r in v) * 1e3:.0f} ms"
                        for k, v in sorted(result["runs"].items())))
            for rep in range(args.reps):
                order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
                for kind in order:
                    result, error = run_worker(kind, args, t, gguf if kind == "llamacpp" else None)
                    if result is None:
                        say(f"{t} thread(s) rep {rep + 1}: {kind} worker failed: {error}")
                        if kind == "numpy":
                            return 1
                        continue
                    runs[t][kind].append(result)
                    m = result["medians"]
                    shown = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(m.items()) if v is not None)
                    say(f"{t} thread(s) rep {rep + 1} {kind:8s} load avg {result['load_avg'][0]:.2f}->"
                        f"{result['load_avg'][1]:.2f}: {shown}")
    float64 = None
    if not args.without_float64 and args.spec_reps:
        float64, error = run_worker("float64", args, 1)
        say("float64 speculative vs plain tokens: " + (error if float64 is None else
                                                         ", ".join(f"{k} {'same' if v else 'DIFFERENT'}"
                                                                   for k, v in float64["identical"].items())))
    f32_bytes = runs[threads_list[0]]["numpy"][0]["f32_bytes"]
    formats = storage_bytes(f32_bytes)
    summary = summarize(runs, f32_bytes)
    decoders, bounds, checks = table(summary, formats, threads_list, args.prefill)
    agree = all(r["greedy_equal"] for t in runs for r in runs[t]["numpy"])
    say()
    say(decoders)
    say()
    say("\n".join(bounds))
    say()
    say("Bars:")
    say("\n".join(checks))
    say(f"- greedy tokens of FastLlama and the readable Llama identical in every NumPy process: {agree}")
    loads = [x for t in runs for k in runs[t] for r in runs[t][k] for x in r["load_avg"] if x is not None]
    conditions = (f"Run of {time.strftime('%Y-%m-%d %H:%M')}: load average (1 min) {min(loads):.2f}-{max(loads):.2f} "
                  f"across the processes; {os.cpu_count()} cores. Each figure is the median over "
                  f"{args.reps} process(es) x {args.rounds} round(s).")
    spec_md = ""
    if args.spec_reps:
        bound = {t: 1 / summary[t]["numpy:gemv"] for t in threads_list if summary.get(t, {}).get("numpy:gemv")}
        cpp = {t: summary[t].get("llamacpp:F32") for t in threads_list}
        spec_table, spec_checks = llm_speculation.table(spec_runs, cpp, bound, float64)
        per_prompt = llm_speculation.prompt_table(spec_runs[threads_list[0]])
        say()
        say(spec_table)
        say()
        say(per_prompt)
        say()
        say("\n".join(spec_checks))
        spec_md = (f"\n\nSpeculative decoding (greedy, prompt lookup, at most {llm_speculation.K} guesses a pass; "
                   f"medians over {args.spec_reps} process(es) x {args.spec_rounds} round(s)):\n\n{spec_table}\n\n"
                   f"Per prompt, {threads_list[0]} thread(s):\n\n{per_prompt}\n\n{chr(10).join(spec_checks)}")
    say(conditions)
    md = f"{decoders}\n\n{chr(10).join(bounds)}\n\nBars:\n\n{chr(10).join(checks)}{spec_md}\n\n{conditions}"
    with open(os.path.join(out_dir, "llm_speed.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    with open(os.path.join(out_dir, "llm_speed.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out_dir, "llm_speed.json"), "w") as f:
        json.dump({"formats_bytes": formats, "summary_seconds": {str(t): s for t, s in summary.items()},
                   "speculation": {str(t): r for t, r in spec_runs.items()}, "float64": float64,
                   "runs": {str(t): r for t, r in runs.items()}, "read_bytes": READ_BYTES,
                   "greedy_equal": agree, "conditions": conditions}, f, indent=1)
    plot(summary, formats, threads_list, os.path.join(out_dir, "llm_speed.png"))
    if args.out is None and not replace_block(README, md):
        print(f"(no {README_START} markers in {README}: table not copied)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
