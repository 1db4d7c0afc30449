"""SmolLM2-135M generation speed: the course's NumPy model against transformers on PyTorch.

What is timed, for each side, same GGUF weights dequantised to float32, batch 1:
  * decode: one new token with the KV cache (after a 32-token prompt), ``--steps`` steps, each
    timed on its own; the median is the per-token latency, 1 / median the tokens/s;
  * prefill: the forward pass over a 256-token prompt into an empty cache (median of 3).
NumPy: ``transformer_course.llama.Llama.forward(ids, cache)``. PyTorch: ``LlamaForCausalLM``
(transformers, eager PyTorch, SDPA attention) called the same way with its own ``DynamicCache``,
under ``torch.inference_mode()``. Both greedy, both starting from the same ids.

How: every measurement runs in a fresh process (NumPy and PyTorch never share one: their thread
pools disturb each other); the two alternate, order swapped every repetition, ``--reps`` times;
the result is the median over the processes' medians. Threads are set in the environment before
the libraries start (default 1: at batch 1 the matrices are too small to share, and a second
thread on a busy 2-core machine made it ~10x slower when measured). ``--profile`` also prints,
for NumPy, where a decode step's time goes (cProfile, by function).

    .venv/bin/python bench/llm_speed.py                 # 5 repetitions x 2 sides, ~3 min
    .venv/bin/python bench/llm_speed.py --reps 3 --threads 2 --profile

Needs the model (requirements/model.txt) and gguf; the PyTorch side also needs torch,
transformers and accelerate (without them only the NumPy row is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET_RATIO = 1.0            # NumPy per-token latency / PyTorch's: at most 1
PROMPT, LONG_PROMPT = 32, 256


def prompt_ids(n, seed=0):
    import numpy as np

    return np.random.default_rng(seed).integers(1000, 20000, size=n)


def decode_times(step, first_token, steps):
    """Time ``steps`` greedy steps one by one; ``step(token) -> next token``.
    Returns (wall seconds, CPU seconds of this process) per step."""
    token, times, cpu = first_token, [], []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        token = step(token)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu


def worker_numpy(steps, profile):
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course.smollm2 import load_smollm2

    t0 = time.perf_counter()
    model = load_smollm2(dtype=np.float32).model
    load = time.perf_counter() - t0
    cache = model.new_cache(PROMPT + steps + 8)
    first = int(np.argmax(model.forward(prompt_ids(PROMPT), cache)[-1]))

    def step(token):
        return int(np.argmax(model.forward(np.array([token]), cache)[-1]))

    step(first)                                           # warm-up
    times, cpu = decode_times(step, first, steps)
    prefill = []
    for _ in range(3):
        t0 = time.perf_counter()
        model.forward(prompt_ids(LONG_PROMPT, 1), model.new_cache(LONG_PROMPT))
        prefill.append(time.perf_counter() - t0)
    result = {"decode": statistics.median(times), "decode_cpu": statistics.median(cpu),
              "prefill": statistics.median(prefill), "load": load}
    if profile:
        result["profile"] = profile_decode(model, first)
    return result


def profile_decode(model, first, steps=20):
    """Share of a decode step's time per function (cProfile's own time; matmuls written with
    ``@`` count in the function that does them: ``forward`` holds q/k/v/o and the output head,
    ``swiglu`` the three feed-forward matrices)."""
    import cProfile
    import pstats

    import numpy as np

    cache = model.new_cache(steps + 4)
    model.forward(np.array([first]), cache)
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(steps):
        model.forward(np.array([first + i]), cache)
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = sum(v[2] for v in stats.values())
    by_name = {}
    for (filename, _, name), v in stats.items():
        key = name if "transformer_course" in filename else f"numpy/other: {name}"
        by_name[key] = by_name.get(key, 0.0) + v[2]
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:8]
    return [(name, seconds / total) for name, seconds in top]


def worker_torch(steps, profile):
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
    load = time.perf_counter() - t0

    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        ids = torch.as_tensor(prompt_ids(PROMPT)[None], dtype=torch.long)
        first = int(model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0, -1].argmax())

        def step(token):
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            return int(out.logits[0, -1].argmax())

        step(first)
        times, cpu = decode_times(step, first, steps)
        prefill = []
        for _ in range(3):
            long_ids = torch.as_tensor(prompt_ids(LONG_PROMPT, 1)[None], dtype=torch.long)
            t0 = time.perf_counter()
            model(input_ids=long_ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
            prefill.append(time.perf_counter() - t0)
    return {"decode": statistics.median(times), "decode_cpu": statistics.median(cpu),
            "prefill": statistics.median(prefill), "load": load, "threads": torch.get_num_threads()}


def run_worker(kind, steps, profile, env):
    cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(steps)] + (["--profile"] if profile else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="processes per side (default 5)")
    parser.add_argument("--steps", type=int, default=64, help="timed decode steps per process (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="threads for both sides (default 1)")
    parser.add_argument("--profile", action="store_true", help="print where NumPy's decode time goes")
    parser.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker = worker_numpy if args.worker == "numpy" else worker_torch
        print(json.dumps(worker(args.steps, args.profile)))
        return 0

    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(args.threads)
    print(f"SmolLM2-135M, float32, batch 1, {args.threads} thread(s); {args.steps} decode steps after a "
          f"{PROMPT}-token prompt; prefill of {LONG_PROMPT} tokens")
    results = {"numpy": [], "torch": []}
    skipped = None
    for rep in range(args.reps):
        for kind in (["numpy", "torch"] if rep % 2 == 0 else ["torch", "numpy"]):
            if kind == "torch" and skipped:
                continue
            result, error = run_worker(kind, args.steps, args.profile and rep == 0, env)
            if result is None:
                if kind == "numpy":
                    print(f"NumPy worker failed: {error}")
                    return 1
                skipped = error
                continue
            results[kind].append(result)
            print(f"rep {rep + 1}/{args.reps}  {kind:5s}  {result['decode'] * 1e3:6.1f} ms/token "
                  f"({1 / result['decode']:5.1f} tokens/s, CPU {result['decode_cpu'] * 1e3:6.1f} ms)  "
                  f"prefill {LONG_PROMPT}: {result['prefill']:5.2f} s  load {result['load']:5.1f} s")
            for name, share in result.get("profile", []):
                print(f"      {share:6.1%}  {name}")

    def med(kind, key):
        return statistics.median(r[key] for r in results[kind])

    print(f"\nNumPy   median of {len(results['numpy'])}: {med('numpy', 'decode') * 1e3:6.1f} ms/token "
          f"({1 / med('numpy', 'decode'):5.1f} tokens/s), prefill {med('numpy', 'prefill'):.2f} s")
    if skipped:
        print(f"PyTorch skipped: {skipped}")
        return 0
    print(f"PyTorch median of {len(results['torch'])}: {med('torch', 'decode') * 1e3:6.1f} ms/token "
          f"({1 / med('torch', 'decode'):5.1f} tokens/s), prefill {med('torch', 'prefill'):.2f} s")
    ratio = med("numpy", "decode") / med("torch", "decode")
    print(f"per-token latency ratio NumPy / PyTorch: {ratio:.2f}  (target <= {TARGET_RATIO}); "
          f"prefill ratio {med('numpy', 'prefill') / med('torch', 'prefill'):.2f}")
    print("per-repetition latency ratios:", " ".join(
        f"{a['decode'] / b['decode']:.2f}" for a, b in zip(results["numpy"], results["torch"])))
    if args.threads == 1:   # one thread each: CPU time is the measure least disturbed by other processes
        print(f"CPU time per token, one thread each: NumPy {med('numpy', 'decode_cpu') * 1e3:.1f} ms, PyTorch "
              f"{med('torch', 'decode_cpu') * 1e3:.1f} ms, ratio {med('numpy', 'decode_cpu') / med('torch', 'decode_cpu'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
