"""Speculative decoding of SmolLM2-135M against plain decoding (part of ``make bench-llm``, llm_speed.py).

At batch 1 a decode step reads every weight once for one token: the one-token bound of llm_speed.py. A verify
pass of speculative decoding (``transformer_course.speculative``) reads them once for the last token and up to
``K`` guesses of a drafter, and keeps the guesses the model agrees with, so on text that repeats its context it
can produce more tokens per second than that bound allows one token at a time. Here: greedy decoding of
:data:`PROMPTS` -- *grounded* (the continuation repeats or edits the prompt: a summary of a given paragraph, the
paragraph rewritten, code with a small change, a list continued) and *free* (nothing to copy) -- by ``FastLlama``
and the readable ``Llama``, plainly (the same loop, a drafter that never guesses) and with prompt lookup
(``PromptLookup``), side by side in one process, alternating. Each prompt's answer length is fixed first (plain
greedy up to ``<|im_end|>``, at most ``--spec-tokens``); times exclude the prompt's prefill (the first forward
call, which gives the first token: tokens/s count the tokens after it), include the drafter and the loop.

Correctness, in the same run: the tokens of every speculative run equal the plain run's in float32 -- or, where
not, the first difference sits where plain decoding's top-2 logit gap is below :data:`FLOAT32_GAP` x max |logit|
(two summation orders of the same float32 model differ by less: tests/test_fast_llama.py) -- and, in a float64
process (``worker_float64``), identical for both decoders on every prompt.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
K = 16                   # the most guesses verified in one pass
FLOAT32_GAP = 2e-5       # x max |logit|: the float32 error bound between two summation orders (test_fast_llama)
TARGET_GROUNDED, TARGET_FREE = 1.5, 0.95     # issue 42: >= 1.5x plain on grounded text, >= 0.95x on free text
IM_END = 2               # <|im_end|>

PARAGRAPH = ("The lighthouse on Gull Rock was built in 1871 to guide fishing boats into the harbour of Port Ellen. "
             "For ninety years a keeper and his family lived at its foot, trimming the wick every four hours and "
             "winding the clockwork that turned the lens. In 1961 the light was automated, the family moved to the "
             "mainland, and the cottage was left empty. Today the lighthouse is run by a charity that opens it to "
             "visitors every summer, and the cottage has been restored as a small museum about the keepers' lives.")
SHOP = '''# shop.py

def total_weight(items):
    """Add up the weight of every item in the basket, in grams."""
    total = 0
    for item in items:
        if item.quantity <= 0:
            continue
        total = total + item.weight * item.quantity
    return total


def total_price(items):
    """Add up the price of every item in the basket, in cents."""
'''
TABLE = ("| country | capital | continent |\n|---|---|---|\n| France | Paris | Europe |\n| Germany | Berlin | Europe |\n"
         "| Japan | Tokyo | Asia |\n| Brazil | Brasília | South America |\n| Kenya |")
#: name -> (group, chat message or None for plain text, text, the start of the answer)
PROMPTS = {
    "summary": ("grounded", "Summarize this paragraph:\n\n" + PARAGRAPH, "The lighthouse on Gull Rock"),
    "rewrite": ("grounded", "Rewrite this paragraph in the past tense, changing nothing else:\n\n" + PARAGRAPH, ""),
    "code": ("grounded", None, SHOP),
    "list": ("grounded", None, TABLE),
    "story": ("free", "Write a short story about a fox who learns to swim.", ""),
    "tips": ("free", "Give three tips for learning to cook.", ""),
    "explain": ("free", "Explain why the sky is blue.", ""),
}


def chosen(args) -> list:
    """The prompts of this run: ``--spec-prompts`` (comma-separated names), default all."""
    names = list(PROMPTS) if not getattr(args, "spec_prompts", None) else args.spec_prompts.split(",")
    unknown = [n for n in names if n not in PROMPTS]
    if unknown:
        raise SystemExit(f"--spec-prompts: unknown {unknown}; known: {list(PROMPTS)}")
    return names


def names_in(results, group) -> list:
    return [n for n in results[0]["lengths"] if PROMPTS[n][0] == group]


def prompt_ids(lm, name):
    """Token ids of prompt ``name``: the chat template around the message, then the answer's start (or plain text)."""
    group, message, text = PROMPTS[name]
    if message is not None:
        text = lm.chat([{"role": "user", "content": message}]) + text
    return lm.encode(text)


class NoGuess:
    """The drafter of plain decoding: never guesses, so the loop makes plain decoding's forward calls (the prompt's
    pass gives the first token, then one pass per token, as ``generate(CachedStep(model))``)."""

    def propose(self, ids, k, rng=None):
        import numpy as np

        from transformer_course.speculative import Draft
        return Draft(np.zeros(0, dtype=np.int64))


class Timed:
    """A model whose first ``forward`` call (the prompt's prefill) is timed, so that it can be left out."""

    def __init__(self, model):
        self.model, self.prefill = model, None

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, ids, cache=None):
        if self.prefill is not None:
            return self.model.forward(ids, cache)
        c, t = time.process_time(), time.perf_counter()
        out = self.model.forward(ids, cache)
        self.prefill = (time.perf_counter() - t, time.process_time() - c)
        return out


def decode(model, ids, n_new, drafter):
    """``(tokens, wall seconds, cpu seconds, stats)`` of greedy decoding, the prompt's prefill left out."""
    from transformer_course.speculative import SpeculationStats, speculative_generate

    timed, stats = Timed(model), SpeculationStats()
    c, t = time.process_time(), time.perf_counter()
    out = speculative_generate(timed, ids, n_new, drafter, k=K, temperature=0.0, stats=stats)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    prefill = timed.prefill or (0.0, 0.0)
    return out, wall - prefill[0], cpu - prefill[1], stats


def answer_lengths(model, lm, limit, names):
    """Tokens to generate per prompt: plain greedy up to and including ``<|im_end|>``, at most ``limit``."""
    import numpy as np

    lengths = {}
    for name in names:
        ids = prompt_ids(lm, name)
        new = model.generate_greedy(ids, limit)[ids.size:]
        end = np.flatnonzero(new == IM_END)
        lengths[name] = int(end[0]) + 1 if end.size else limit
    return lengths


def first_difference(model, plain, other):
    """None if equal, else ``(position, top-2 gap, bound)`` of plain decoding's logits at the first difference."""
    import numpy as np

    if np.array_equal(plain, other):
        return None
    i = int(np.flatnonzero(plain != other)[0])
    logits = np.asarray(model.forward(plain[:i])[-1], dtype=np.float64)
    top = np.sort(logits)[-2:]
    return i, float(top[1] - top[0]), float(FLOAT32_GAP * np.abs(logits).max())


def worker_spec(args):
    """FastLlama and the readable Llama, float32: every prompt plainly and speculatively, alternating."""
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course.speculative import PromptLookup
    from transformer_course_fast.llama import load_fast_smollm2

    names = chosen(args)
    fast, lm = load_fast_smollm2(dtype=np.float32)
    decoders = {"fast": fast, "readable": lm.model}
    lengths = answer_lengths(fast, lm, args.spec_tokens, names)
    ids = {name: prompt_ids(lm, name) for name in names}
    runs = {f"{d}:{name}:{mode}": [] for d in decoders for name in names for mode in ("plain", "spec")}
    differences = {}
    for r in range(args.rounds):
        for d in (("fast", "readable") if r % 2 == 0 else ("readable", "fast")):
            for name in names:
                tokens = {}
                for mode in (("plain", "spec") if r % 2 == 0 else ("spec", "plain")):
                    drafter = NoGuess() if mode == "plain" else PromptLookup()
                    out, wall, cpu, st = decode(decoders[d], ids[name], lengths[name], drafter)
                    tokens[mode] = out
                    runs[f"{d}:{name}:{mode}"].append({"wall": wall, "cpu": cpu, "passes": st.passes,
                                                       "drafted": st.drafted, "accepted": st.accepted,
                                                       "generated": st.generated})
                diff = first_difference(decoders[d], tokens["plain"], tokens["spec"])
                if diff is not None:
                    differences[f"{d}:{name}"] = diff
                if d == "fast" and r == 0:     # FastLlama's own greedy loop agrees with the plain loop
                    same = np.array_equal(fast.generate_greedy(ids[name], lengths[name]), tokens["plain"])
                    differences.setdefault("generate_greedy", []).append(bool(same))
    return {"runs": runs, "lengths": lengths, "prompt_tokens": {n: int(v.size) for n, v in ids.items()},
            "differences": differences, "threads": int(os.environ.get("OPENBLAS_NUM_THREADS", "1")),
            "stacked_rows": fast.stacked_rows}


def worker_float64(args):
    """Both decoders in float64, every prompt: speculative tokens identical to plain decoding's (untimed)."""
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course.speculative import PromptLookup
    from transformer_course_fast.llama import load_fast_smollm2

    names = chosen(args)
    fast, lm = load_fast_smollm2(dtype=np.float64)
    lengths = answer_lengths(fast, lm, args.spec_tokens, names)
    identical = {}
    for d, model in (("fast", fast), ("readable", lm.model)):
        for name in names:
            ids = prompt_ids(lm, name)
            plain = decode(model, ids, lengths[name], NoGuess())[0]
            spec = decode(model, ids, lengths[name], PromptLookup())[0]
            identical[f"{d}:{name}"] = bool(np.array_equal(plain, spec))
    return {"identical": identical, "lengths": lengths}


# ---------------------------------------------------------------------------------------------------------------
# Summary and table
# ---------------------------------------------------------------------------------------------------------------
def summarize(results: list) -> dict:
    """Per decoder, group and mode: tokens, median decode seconds (wall, cpu) per prompt summed over the group,
    and the speculation's counts. ``results``: the spec workers' results of one thread count."""
    out = {}
    if not results:
        return out
    lengths = results[0]["lengths"]
    for d in ("fast", "readable"):
        for group in ("grounded", "free"):
            names = names_in(results, group)
            if not names:
                continue
            for mode in ("plain", "spec"):
                cell = {"tokens": 0, "timed": 0, "wall": 0.0, "cpu": 0.0, "passes": 0, "drafted": 0, "accepted": 0}
                for name in names:
                    rows = [row for res in results for row in res["runs"][f"{d}:{name}:{mode}"]]
                    cell["tokens"] += lengths[name]
                    cell["timed"] += lengths[name] - 1     # the prompt's pass, untimed, gives the first
                    cell["wall"] += statistics.median(row["wall"] for row in rows)
                    cell["cpu"] += statistics.median(row["cpu"] for row in rows)
                    for key in ("passes", "drafted", "accepted"):
                        cell[key] += rows[0][key]          # the same in every run: greedy tokens are fixed
                out[f"{d}:{group}:{mode}"] = cell
    return out


LABELS = {"fast": "NumPy `FastLlama`", "readable": "NumPy `Llama` (readable)"}


def table(by_threads: dict, llamacpp_f32: dict, bound: dict, float64: dict | None) -> tuple[str, list]:
    """The markdown table (tokens/s with and without speculation beside the one-token bound and llama.cpp) and
    the bar lines. ``by_threads``: ``{threads: [spec worker results]}``; ``llamacpp_f32``/``bound``: seconds per
    token and tokens/s per thread count (None where not measured)."""
    lines = ["| decoder | threads | text | tokens | tokens/s plain | tokens/s speculative | speed-up | guesses kept | "
             "tokens per pass | one-token bound (GEMV) tokens/s | llama.cpp F32 plain tokens/s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    checks = []
    for t, results in sorted(by_threads.items()):
        s = summarize(results)
        cpp = llamacpp_f32.get(t)
        for d in ("fast", "readable"):
            for group in ("grounded", "free"):
                if f"{d}:{group}:plain" not in s:
                    continue
                plain, spec = s[f"{d}:{group}:plain"], s[f"{d}:{group}:spec"]
                tps_plain, tps_spec = plain["timed"] / plain["wall"], spec["timed"] / spec["wall"]
                kept = f"{100 * spec['accepted'] / spec['drafted']:.0f} %" if spec["drafted"] else "—"
                lines.append(f"| {LABELS[d]} | {t} | {group} ({len(names_in(results, group))} prompts) | "
                             f"{spec['tokens']} | {tps_plain:.1f} | {tps_spec:.1f} | {tps_spec / tps_plain:.2f}x | "
                             f"{kept} | {spec['tokens'] / spec['passes']:.2f} | "
                             f"{'—' if bound.get(t) is None else f'{bound[t]:.1f}'} | "
                             f"{'—' if cpp is None else f'{1 / cpp:.1f}'} |")
                if d != "fast":
                    continue
                x = tps_spec / tps_plain
                if t == 1:      # one thread: CPU time is what a busy machine disturbs least
                    checks.append(f"- FastLlama, 1 thread, {group} text, by CPU time: speculation "
                                  f"{plain['cpu'] / spec['cpu']:.2f}x its plain tokens/s "
                                  f"({plain['timed'] / plain['cpu']:.1f} -> {spec['timed'] / spec['cpu']:.1f})")
                if group == "grounded":
                    checks.append(f"- FastLlama, {t} thread(s), grounded text: speculation {x:.2f}x its plain tokens/s "
                                  f"(target >= {TARGET_GROUNDED}x): {'met' if x >= TARGET_GROUNDED else 'NOT met'}; "
                                  f"{spec['accepted']} of {spec['drafted']} guesses kept, "
                                  f"{spec['tokens'] / spec['passes']:.2f} tokens per pass")
                    if cpp is not None:
                        y = tps_spec * cpp
                        checks.append(f"- FastLlama, {t} thread(s), grounded text: {tps_spec:.1f} tokens/s with speculation "
                                      f"against llama.cpp's F32 file plainly {1 / cpp:.1f} ({y:.2f}x; target > 1): "
                                      f"{'met' if y > 1 else 'NOT met'}")
                else:
                    checks.append(f"- FastLlama, {t} thread(s), free text: speculation {x:.2f}x its plain tokens/s "
                                  f"(target >= {TARGET_FREE}x: at most 5 % slower): {'met' if x >= TARGET_FREE else 'NOT met'}")
        diffs = {k: v for res in results for k, v in res["differences"].items() if k != "generate_greedy"}
        near_ties = [k for k, (_, gap, b) in diffs.items() if gap <= b]
        far = [f"{k} at token {i} (gap {gap:.3g} > bound {b:.3g})" for k, (i, gap, b) in diffs.items() if gap > b]
        n_runs = 2 * len(results[0]["lengths"])
        checks.append(f"- float32, {t} thread(s): speculative tokens identical to plain decoding on "
                      f"{n_runs - len(diffs)} of {n_runs} decoder x prompt runs; differences at a "
                      f"near tie (top-2 gap <= {FLOAT32_GAP:g} x max |logit|): {len(near_ties)}"
                      + (f" ({', '.join(near_ties)})" if near_ties else "")
                      + (f"; NOT at a near tie: {'; '.join(far)}" if far else ""))
        agree = all(x for res in results for x in res["differences"].get("generate_greedy", []))
        checks.append(f"- FastLlama.generate_greedy gives the plain loop's tokens on every prompt ({t} thread(s)): {agree}")
    if float64 is not None:
        same = [k for k, v in float64["identical"].items() if v]
        checks.append(f"- float64: speculative tokens identical to plain decoding on {len(same)} of "
                      f"{len(float64['identical'])} decoder x prompt runs")
    return "\n".join(lines), checks


def prompt_table(results: list) -> str:
    """Per prompt (one thread count): tokens, plain and speculative tokens/s, guesses kept, tokens per pass."""
    lengths = results[0]["lengths"]
    lines = ["| decoder | prompt | text | prompt tokens | new tokens | tokens/s plain | tokens/s speculative | speed-up | "
             "guesses kept | tokens per pass |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for d in ("fast", "readable"):
        for name in lengths:
            group = PROMPTS[name][0]
            plain = [row for res in results for row in res["runs"][f"{d}:{name}:plain"]]
            spec = [row for res in results for row in res["runs"][f"{d}:{name}:spec"]]
            tp = (lengths[name] - 1) / statistics.median(r["wall"] for r in plain)
            ts = (lengths[name] - 1) / statistics.median(r["wall"] for r in spec)
            kept = f"{100 * spec[0]['accepted'] / spec[0]['drafted']:.0f} %" if spec[0]["drafted"] else "—"
            lines.append(f"| {LABELS[d]} | {name} | {group} | {results[0]['prompt_tokens'][name]} | {lengths[name]} | "
                         f"{tp:.1f} | {ts:.1f} | {ts / tp:.2f}x | {kept} | "
                         f"{lengths[name] / spec[0]['passes']:.2f} |")
    return "\n".join(lines)
