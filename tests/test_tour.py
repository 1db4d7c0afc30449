"""`python -m transformer_course` prints the seed script's demos; check what it claims."""

import subprocess
import sys

import numpy as np

from transformer_course import __main__ as tour


def test_tour_runs_and_prints_its_claims():
    done = subprocess.run([sys.executable, "-m", "transformer_course"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for title in ("soft dictionary lookup", "Why divide by sqrt(d_k)", "blind to order", "causal mask", "Multi-head"):
        assert title in out, f"demo {title!r} missing from the tour"
    assert "without positional encoding: True" in out
    assert "with positional encoding:    False" in out
    assert "upper triangle is exactly 0.0" in out
    assert done.stderr == "", done.stderr


def test_soft_lookup_claims():
    r = tour.demo_soft_lookup()
    assert r["soft_max_weight"] < 0.3 and r["sharp_weight"] > 0.99


def test_scaling_claims():
    r = tour.demo_why_scale()
    for d_k, (var, max_raw, max_scaled) in r.items():
        assert abs(var / d_k - 1) < 0.15
    assert r[512][1] > 0.9 and r[512][2] < 0.9
    assert r[4][1] < r[64][1] <= r[512][1]


def test_order_and_mask_claims():
    assert tour.demo_order_blind() == {"same_without_pe": True, "same_with_pe": False}
    r = tour.demo_causal_mask()
    assert r["upper_max"] == 0.0 and r["past_unchanged"]


def test_multihead_claims():
    r = tour.demo_multihead()
    assert r["shape_in"] == r["shape_out"] and r["distinct_heads"] == 4
    assert np.prod(r["shape_out"]) == 40
