"""tools/nbval_blas.py picks the other settings nbval runs under from what the CPU reports.

The choice is checked on made-up CPUs (an AVX-512 server, an AVX2 laptop, a CPU with no dispatched
path, one without AVX-512 for the kernels) and then on this machine, where the chosen
NPY_DISABLE_CPU_FEATURES must really switch NumPy's paths off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import nbval_blas  # noqa: E402

X86 = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]           # NumPy 2.4's x86-64 dispatch targets


def fake_cpu(monkeypatch, running: set[str]):
    """NumPy reports `running` as on; NPY_DISABLE_CPU_FEATURES turns the names it lists off."""
    def levels(env):
        off = set(env.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split())
        return [(name, name in running and name not in off) for name in X86]
    monkeypatch.setattr(nbval_blas, "_dispatch_levels", levels)


@pytest.mark.parametrize("running, expected", [
    ({"X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"}, "X86_V4 AVX512_ICL AVX512_SPR"),   # Sapphire Rapids
    ({"X86_V3", "X86_V4", "AVX512_ICL"}, "X86_V4 AVX512_ICL AVX512_SPR"),                 # Ice Lake server
    ({"X86_V3", "X86_V4"}, "X86_V4 AVX512_ICL AVX512_SPR"),                               # Skylake-X
    ({"X86_V3"}, "X86_V3"),                                                               # AVX2 laptop, this AMD
    (set(), None),                                                                        # baseline only
])
def test_lower_simd_path_is_one_level_below_what_the_cpu_runs(monkeypatch, running, expected):
    fake_cpu(monkeypatch, running)
    assert nbval_blas.lower_simd_path() == expected


def test_a_value_numpy_does_not_take_is_an_error(monkeypatch):
    # NumPy 2.4 silently ignores names it does not know (the old "AVX2,FMA3"): a setting that leaves the
    # paths on would check nothing, so it must fail rather than pass.
    monkeypatch.setattr(nbval_blas, "_dispatch_levels", lambda env: [("X86_V3", True), ("X86_V4", False)])
    with pytest.raises(RuntimeError, match="left \\['X86_V3'\\] running"):
        nbval_blas.lower_simd_path()


def test_no_kernel_the_cpu_cannot_run(monkeypatch):
    monkeypatch.setattr(nbval_blas, "cpu_flags", lambda: {"sse2", "avx", "avx2", "fma"})      # no avx512f
    monkeypatch.setattr(nbval_blas, "default_kernel", lambda: "Haswell")
    assert nbval_blas.other_kernels() == ["Sandybridge", "Nehalem"]
    monkeypatch.setattr(nbval_blas, "cpu_flags", lambda: {"sse2", "avx", "avx2", "avx512f"})
    assert nbval_blas.other_kernels() == ["SkylakeX", "Sandybridge"]
    monkeypatch.setattr(nbval_blas, "default_kernel", lambda: "SkylakeX")
    assert nbval_blas.other_kernels() == ["Haswell", "Sandybridge"]


def test_the_axes_share_the_existing_runs(monkeypatch):
    """Two runs besides the default, whatever the CPU: the SIMD axis rides on the one-thread kernel run."""
    fake_cpu(monkeypatch, {"X86_V3"})
    monkeypatch.setattr(nbval_blas, "other_kernels", lambda n=2: ["Sandybridge", "Nehalem"][:n])
    assert nbval_blas.settings() == [
        {"OPENBLAS_CORETYPE": "Sandybridge", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
         "NPY_DISABLE_CPU_FEATURES": "X86_V3"},
        {"OPENBLAS_CORETYPE": "Nehalem", "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}]
    monkeypatch.setattr(nbval_blas, "other_kernels", lambda n=2: [])
    assert nbval_blas.settings() == [{"NPY_DISABLE_CPU_FEATURES": "X86_V3"}]


def test_on_this_machine_the_setting_switches_numpys_paths_off():
    value = nbval_blas.lower_simd_path()
    if value is None:
        pytest.skip("NumPy dispatches no SIMD path on this CPU")
    code = ("from numpy._core._multiarray_umath import __cpu_features__ as f; import sys; "
            "print(' '.join(n for n in sys.argv[1].split() if f[n]))")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=value)
    on = subprocess.run([sys.executable, "-c", code, value], env=env, capture_output=True, text=True, check=True)
    assert on.stdout.strip() == "", f"still on under NPY_DISABLE_CPU_FEATURES={value!r}: {on.stdout}"
    # and the settings only ever name kernels from the CPU's own flags
    flags = nbval_blas.cpu_flags()
    needs = dict(nbval_blas.KERNELS)
    for setting in nbval_blas.settings():
        if "OPENBLAS_CORETYPE" in setting:
            assert needs[setting["OPENBLAS_CORETYPE"]] <= flags, setting
