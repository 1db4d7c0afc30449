"""Every number a Reading states is computed above it, and every Reading follows a check that can fail.

The course's rule (README, issue 14): each "**Reading.**" paragraph of a notebook describes what the
cells above it computed; every number or property it states is computed and asserted there, and a
value from one run is called "measured here". This test guards the part a machine can check:

1. a Reading follows at least one code cell with an ``assert`` (or ``assert_close``) since the
   previous Reading or section heading;
2. every decimal number (``0.95``, ``42.8``) and every power of ten (``10^{-4}``) a Reading states
   appears either as a literal in the code above it or in the printed output of a cell above it in
   the executed ``solutions/`` copy, unless ALLOWED lists it with the reason it needs no cell
   (a constant, a derivation in the text itself, a default tolerance).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").iterdir() if re.match(r"\d\d_", p.name))

DECIMAL = re.compile(r"(?<![\w.{^§])(\d+\.\d+)(?!\d)")
POWER = re.compile(r"10\^\{?(-?\d+)\}?")

# (notebook, cell id, number as written) -> why no cell needs to compute it
ALLOWED = {
    ("04_positional_encoding", "nb04-020", "0.316"): "omega_1 = 10000^(-2/16), derived in the text two cells above",
    ("05_encoder_block", "nb05-007", "0.01"): "the variance of a spread of 0.1, derived in the sentence itself",
    ("08_decoder", "69a50cec", "12.7"): "36 / sqrt(8), derived in the sentence itself",
    ("08_decoder", "019772cc", "10^{-8}"): "11 e^-20, derived in the sentence (the asserted bound is 10^-7)",
    ("02_scaling", "nb02-018", "10^{-16}"): "float64 machine epsilon, a constant quoted in the error estimate",
    ("02_scaling", "nb02-023", "10^{-6}"): "an example plugged into the asserted bound 2(1 - max p)",
    ("03_multihead", "nb03-028", "10^{-6}"): "assert_close's default tolerance",
    ("06_failures", "nb06-017", "10^{-6}"): "assert_close's default tolerance (the check above the Reading)",
    ("07_pretrained_minilm", "nb07-004", "10^{-5}"): "PyTorch's default layer-norm epsilon, a constant",
    ("07_pretrained_minilm", "nb07-028", "10^{-6}"): "the written question quotes tests/test_pretrained_minilm.py",
    ("11_finetune", "nb11-031", "10^{-12}"): "quotes tests/test_smollm2.py (float64 logits vs transformers, measured <= 6e-13)",
    ("07_pretrained_minilm", "nb07-028", "10^{-15}"): "the written question quotes tests/test_pretrained_minilm.py",
    ("09_llm", "b505b114", "10^{-8}"): "float32's unit round-off 2^-24 = 6e-8, a constant in the error estimate",
    ("09_llm", "56f0e37d", "10.8"): "ln 49152, derived in the sentence itself",
    ("10_learning", "bce8e7a8", "10^{-10}"): "quotes TORCH_TOL of tests/test_backward.py and tests/test_training.py",
}


def _variants(token: str) -> set[str]:
    if token.startswith("10^"):
        n = int(POWER.match(token).group(1))
        return {f"1e{n}", f"1e{n:+d}", f"10.0 ** {n}", f"10 ** {n}", f"10.0**{n}", f"1e-{abs(n):02d}"}
    return {token, token.rstrip("0").rstrip(".")}


def _rounds_to(token: str, printed: str) -> bool:
    """A printed number with more digits that rounds to the stated one (5.6569 -> 5.657)."""
    if token.startswith("10^"):
        return False
    digits = len(token.split(".")[1])
    return any(round(float(x), digits) == float(token) for x in DECIMAL.findall(printed)
               if len(x.split(".")[1]) > digits)


def _numbers(text: str) -> set[str]:
    return set(DECIMAL.findall(text)) | {f"10^{{{e}}}" for e in POWER.findall(text)}


def _printed(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def readings(name):
    """(cell id, reading text, code above, printed output above, asserts since the last reading)."""
    source = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    executed = {c.get("id"): c for c in nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4).cells}
    code, printed, recent_asserts = "", "", 0
    for cell in source.cells:
        if cell.cell_type == "code":
            code += "\n" + cell.source
            printed += "\n" + _printed(executed.get(cell.get("id"), {}))
            recent_asserts += len(re.findall(r"\bassert(_close)?\b", cell.source))
        elif cell.source.startswith("**Reading.**"):
            text = re.split(r"^#+ ", cell.source, flags=re.M)[0]          # the paragraph, not the next exercise
            yield cell.get("id"), text, code, printed, recent_asserts
            recent_asserts = 0
        elif cell.source.lstrip().startswith("## "):
            recent_asserts = 0


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_reading_follows_a_check(name):
    bare = [cid for cid, _, _, _, n_asserts in readings(name) if n_asserts == 0]
    assert not bare, f"{name}: Readings with no assert in the code cells since the previous one: {bare}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_number_in_a_reading_is_computed_above_it(name):
    missing = []
    for cid, text, code, printed, _ in readings(name):
        for token in _numbers(text):
            if (name, cid, token) in ALLOWED:
                continue
            if not any(v in code or v in printed for v in _variants(token)) and not _rounds_to(token, printed):
                missing.append((cid, token))
    assert not missing, (f"{name}: numbers stated in a Reading that no cell above computes or prints "
                         f"(compute and assert them, or add them to ALLOWED with a reason): {missing}")


def test_allowed_entries_are_still_used():
    # A stale allow-list entry would silently allow the number again if it came back.
    for (name, cid, token) in ALLOWED:
        texts = {c: t for c, t, *_ in readings(name)}
        assert token in _numbers(texts.get(cid, "")), f"ALLOWED entry not found: {(name, cid, token)}"
