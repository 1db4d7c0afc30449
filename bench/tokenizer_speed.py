"""The course's tokenizers (notebook 12) against the `tokenizers` library, on 1 MB of text, one thread.

Text: 1,000,000 characters without repeats -- Python's own documentation (pydoc topics), NumPy's
docstrings, standard-library sources, Article 1 of the UDHR in fourteen languages -- fixed by the pinned
Python and NumPy. Each implementation runs in its own process (``--rounds`` times, order alternating),
with one thread (OPENBLAS_NUM_THREADS=1, RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), builds its
tokenizer, encodes the whole text once from a cold cache (what a user pays for a new megabyte), and
reports the time of the encoding alone. The table shows the median over processes.

* SmolLM2: the course's ``ByteLevelBPE`` (``smollm2.load_tokenizer``) against ``tokenizers`` running the
  model's own pipeline (Digits + ByteLevel, BPE from the GGUF file's vocabulary and merges): the megabyte as
  one string, and cut at its blank lines into paragraphs (``encode_batch`` on one thread, against the
  course's ``encode`` of each paragraph).
* MiniLM: the course's ``WordPiece`` against ``tokenizers`` with ``tokenizer.json`` (no padding or
  truncation).

Both must give the same ids for the whole megabyte (checked in every process pair). Beside the ratio, a
breakdown of the course's BPE encoding in one process: the split (``regex``), the merging of the
distinct pieces, the rest (the cache look-ups and the relabelling). The machine's load (1-minute load
average) is printed before and after: on a shared machine, read the ratio, not the times.

Target (issue 41): course BPE within 10x of ``tokenizers`` on one thread.

Usage::

    .venv/bin/python bench/tokenizer_speed.py            # 3 rounds (~1 min)
    .venv/bin/python bench/tokenizer_speed.py --quick    # 1 round on 100 KB
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET = 10.0
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def megabyte_text(size: int = 1_000_000) -> str:
    """``size`` characters of text without repeats (see the module's docstring)."""
    import inspect
    import sysconfig
    from pathlib import Path

    import numpy as np
    from pydoc_data.topics import topics

    from transformer_course.texts import ARTICLE_1

    parts = [topics[k] for k in sorted(topics)]
    parts += [inspect.getdoc(getattr(np, n)) or "" for n in sorted(dir(np)) if not n.startswith("_")]
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts += [(lib / n).read_text(encoding="utf-8") for n in ("textwrap.py", "heapq.py", "string.py", "difflib.py",
                                                              "statistics.py", "calendar.py", "fractions.py")]
    parts += list(ARTICLE_1.values())
    text = "\n\n".join(parts)
    if len(text) < size:
        raise SystemExit(f"only {len(text)} characters of text without repeats, asked for {size}")
    return text[:size]


def worker(kind: str, size: int) -> dict:
    """One process: build the tokenizer, encode the text once (cold), return the time and the ids' digest."""
    import hashlib

    import numpy as np

    text = megabyte_text(size)
    paragraphs = text.split("\n\n")
    if kind.startswith("course-bpe"):
        from transformer_course import smollm2
        tok = smollm2.load_tokenizer(smollm2.read_gguf().metadata)
        t0 = time.perf_counter()
        if kind.endswith("paragraphs"):
            ids = np.concatenate([tok.encode(p, unknown_bytes="drop") for p in paragraphs])
        else:
            ids = tok.encode(text, unknown_bytes="drop")
    elif kind.startswith("tokenizers-bpe"):
        import tokenizers as tk

        from transformer_course import smollm2
        meta = smollm2.read_gguf().metadata
        tokens = meta["tokenizer.ggml.tokens"]
        tok = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                         merges=[tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]))
        tok.pre_tokenizer = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True),
                                                        tk.pre_tokenizers.ByteLevel(add_prefix_space=False)])
        tok.add_special_tokens([tk.AddedToken(tokens[i], normalized=False, special=True)
                                for i, t in enumerate(meta["tokenizer.ggml.token_type"]) if t == 3])
        t0 = time.perf_counter()
        if kind.endswith("paragraphs"):
            ids = np.array([i for e in tok.encode_batch(paragraphs) for i in e.ids], dtype=np.int64)
        else:
            ids = np.array(tok.encode(text).ids, dtype=np.int64)
    elif kind == "course-wordpiece":
        from transformer_course.pretrained import load_tokenizer
        tok = load_tokenizer()
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False, truncate=False)
    elif kind == "tokenizers-wordpiece":
        import tokenizers as tk

        from transformer_course.pretrained import minilm_path
        tok = tk.Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        t0 = time.perf_counter()
        ids = np.array(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
    else:
        raise SystemExit(f"unknown kind {kind}")
    seconds = time.perf_counter() - t0
    return {"kind": kind, "seconds": seconds, "n_ids": int(ids.size),
            "digest": hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()}


def breakdown(size: int) -> dict:
    """Where the course's BPE encoding of the text spends its time (one process, cold cache)."""
    from collections import Counter

    from transformer_course import bpe, smollm2

    text = megabyte_text(size)
    tok = smollm2.load_tokenizer(smollm2.read_gguf().metadata)
    t0 = time.perf_counter()
    parts = [p for p, special in tok.split_specials(text) if not special]
    pieces = [piece for part in parts for piece in bpe.pretokenize(part, tok.split)]
    t1 = time.perf_counter()
    distinct = Counter(pieces)
    for piece in distinct:
        tok._encode_piece(piece)
    t2 = time.perf_counter()
    total_start = time.perf_counter()
    tok._cache.clear()
    tok.encode(text, unknown_bytes="drop")
    total = time.perf_counter() - total_start
    return {"split": t1 - t0, "merge distinct": t2 - t1, "whole encode": total, "pieces": len(pieces),
            "distinct": len(distinct)}


def run_worker(kind: str, size: int) -> dict:
    env = {**os.environ, **ONE_THREAD}
    out = subprocess.run([sys.executable, __file__, "--worker", kind.replace(" ", "_"), "--size", str(size)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker.replace("_", " "), args.size)))
        return 0
    size, rounds = (100_000, 1) if args.quick else (args.size, args.rounds)
    load_before = os.getloadavg()[0]
    pairs = (("course-bpe", "tokenizers-bpe"), ("course-bpe, paragraphs", "tokenizers-bpe, paragraphs"),
             ("course-wordpiece", "tokenizers-wordpiece"))
    times = {k: [] for pair in pairs for k in pair}
    equal = {pair: True for pair in pairs}
    for r in range(rounds):
        for pair in pairs:
            order = pair if r % 2 == 0 else pair[::-1]
            got = {kind: run_worker(kind, size) for kind in order}
            for kind in pair:
                times[kind].append(got[kind]["seconds"])
            equal[pair] &= got[pair[0]]["digest"] == got[pair[1]]["digest"]
            n_ids = got[pair[1]]["n_ids"]
    env = {**os.environ, **ONE_THREAD}
    parts = json.loads(subprocess.run([sys.executable, "-c", f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                                       f"import tokenizer_speed as t; print(json.dumps(t.breakdown({size})))"],
                                      env=env, capture_output=True, text=True, check=True).stdout)
    load_after = os.getloadavg()[0]
    median = {k: statistics.median(v) for k, v in times.items()}
    lines = [f"Tokenizing {size:,} characters (Python docs, NumPy docstrings, stdlib sources, Article 1 in 14 languages),",
             f"one thread, cold cache, {rounds} process(es) per implementation, median; load average {load_before:.1f} "
             f"before, {load_after:.1f} after (2 cores).",
             "",
             f"{'tokenizer':34s} {'seconds':>8s} {'MB/s':>6s} {'ratio':>6s}  same ids"]
    for course, ref in pairs:
        for kind in (course, ref):
            ratio = median[kind] / median[ref]
            lines.append(f"{kind:34s} {median[kind]:8.3f} {size / 1e6 / median[kind]:6.2f} {ratio:6.2f}  "
                         f"{'yes' if equal[(course, ref)] else 'NO'}")
    bpe_ratio = max(median["course-bpe"] / median["tokenizers-bpe"],
                    median["course-bpe, paragraphs"] / median["tokenizers-bpe, paragraphs"])
    lines += ["",
              f"Course BPE / tokenizers, the larger of the two ratios: {bpe_ratio:.2f}x (target <= {TARGET:.0f}x: "
              f"{'met' if bpe_ratio <= TARGET else 'NOT met'}). 'paragraphs': the text cut at blank lines, "
              "tokenizers' encode_batch (one thread) against the course's encode per paragraph.",
              f"Where the course's BPE spends it (one process): the split (regex) {parts['split']:.3f} s, merging the "
              f"{parts['distinct']:,} distinct pieces of {parts['pieces']:,} {parts['merge distinct']:.3f} s, the whole "
              f"encode {parts['whole encode']:.3f} s (the rest: cache look-ups, relabelling, joining)."]
    print("\n".join(lines))
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
