"""exp_portable: e**x to a few ulp, and the same bits whatever SIMD path NumPy takes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from transformer_course.softmax import exp_portable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import nbval_blas  # noqa: E402


def test_agrees_with_np_exp_to_two_ulp():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-745, 709.7, 200_000), rng.normal(0, 3, 200_000), [0.0, 1.0, -1.0, 1e-300]])
    got, want = exp_portable(x), np.exp(x)
    normal = want > np.finfo(np.float64).tiny
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want[normal])
    assert ulps.max() <= 2, f"exp_portable is {ulps.max()} ulp from np.exp"
    assert np.abs(got[~normal] - want[~normal]).max() <= 4 * np.finfo(np.float64).smallest_subnormal
    assert got.dtype == np.float64 and got.shape == x.shape


def test_edges_as_np_exp():
    x = np.array([-np.inf, np.inf, np.nan, 709.78, 709.79, -746.0, 0.0])
    got = exp_portable(x)
    assert got[0] == 0 and got[1] == np.inf and np.isnan(got[2]) and np.isfinite(got[3])
    assert got[4] == np.inf and got[5] == 0 and got[6] == 1.0


def _digests(env):
    code = ("import hashlib, numpy as np; from transformer_course.softmax import exp_portable; "
            "x = np.random.default_rng(1).normal(0, 20, 100_000); "
            "print(hashlib.sha256(exp_portable(x).tobytes()).hexdigest(), "
            "hashlib.sha256(np.exp(x.astype(np.float32)).tobytes()).hexdigest())")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()


def test_same_bits_on_numpys_lower_simd_path():
    lower = nbval_blas.lower_simd_path()
    here = _digests(dict(os.environ))
    mine = hashlib.sha256(exp_portable(np.random.default_rng(1).normal(0, 20, 100_000)).tobytes()).hexdigest()
    assert here[0] == mine
    if lower is None:
        return
    there = _digests(dict(os.environ, NPY_DISABLE_CPU_FEATURES=lower))
    assert there[0] == here[0], f"exp_portable changed under NPY_DISABLE_CPU_FEATURES={lower}"
    # (np.exp itself may or may not differ there: on the AMD machine float32 np.exp did)
