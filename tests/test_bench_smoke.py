"""`bench/run.py --quick` runs end to end and prints the table it promises.

The quick run uses small shapes and short timings; the figures themselves are
not checked (they depend on the machine), only that every expected row and
column is there, and that a run without PyTorch says what it skipped.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "bench", "run.py")
COLUMNS = ["implementation", "shape", "median ms", "GFLOP/s", "% of GEMM peak", "ratio to PyTorch"]
NUMPY_ROWS = ["NumPy matmul (GEMM)", "NumPy scaled_dot_product_attention (naive)", "NumPy flash_attention",
              "NumPy MultiHeadAttention (naive)", "NumPy FastMultiHeadAttention"]
TORCH_ROWS = ["PyTorch matmul (GEMM)", "PyTorch F.scaled_dot_product_attention", "PyTorch nn.MultiheadAttention"]
HAVE_TORCH = importlib.util.find_spec("torch") is not None
sys.path.insert(0, os.path.join(ROOT, "tools"))
import nbval_blas  # noqa: E402  (which OpenBLAS kernels this CPU runs, and its default)


def run_quick(tmp_path, *extra, env=None):
    proc = subprocess.run([sys.executable, RUN, "--quick", "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def table_rows(text):
    """The markdown table's header and data rows, as lists of cells."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells[0], cells[1:]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One full quick run (plot and memory check included), shared by the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("quick_bench")
    return run_quick(tmp_path, *([] if HAVE_TORCH else ["--without-torch"])), tmp_path


def test_quick_bench_prints_the_full_table(quick_run):
    out, tmp_path = quick_run
    header, rows = table_rows(out)
    assert header == COLUMNS
    labels = [r[0] for r in rows]
    expected = NUMPY_ROWS + (TORCH_ROWS if HAVE_TORCH else [])
    for label in expected:
        assert label in labels, (label, labels)
    # one core shape and one multi-head shape in the quick run, and the core again on one thread
    shapes = [r[1] for r in rows if r[0] == "NumPy flash_attention"]
    assert shapes == ["b=2 h=4 n=128 d=32", "b=2 h=4 n=128 d=32, 1 thread"], shapes
    assert labels.count("NumPy FastMultiHeadAttention") == 1
    one_thread = [r for r in rows if r[1].endswith(", 1 thread")]
    assert [r[0] for r in one_thread] == ["NumPy flash_attention"] + (
        ["PyTorch F.scaled_dot_product_attention"] if HAVE_TORCH else [])   # no naive row there
    assert "1 thread" not in out.split("Targets:")[1].split("Conditions:")[0]   # informative, no target
    # Structure only: every cell a number (how large is the machine's business and the load's --
    # a ratio of 0.00 or a huge median is a busy machine, not a broken bench).
    for r in rows:
        assert float(r[2]) >= 0 and float(r[3]) >= 0                 # median ms, GFLOP/s
        assert r[4] != "—"                                           # % of the peak measured in this run
        if HAVE_TORCH:
            # ratio to PyTorch, measured (two decimals: a loaded machine can print 0.00)
            assert r[5] != "—" and float(r[5]) >= 0
    if HAVE_TORCH:
        torch_ratios = [float(r[5]) for r in rows if r[0].startswith("PyTorch")]
        assert torch_ratios == [1.0] * len(torch_ratios)
    assert "Targets:" in out and "memory, n=1024" in out
    # the files the full run leaves for the README
    md = (tmp_path / "latest.md").read_text()
    assert "| implementation | shape | median ms |" in md
    data = json.loads((tmp_path / "latest.json").read_text())
    assert {r["implementation"] for r in data["rows"]} >= set(expected)
    # The workers saw the thread counts their rows claim: one for the one-thread rows; for the
    # others what the environment allows, else every core (OpenBLAS reads OPENBLAS_NUM_THREADS,
    # then OMP_NUM_THREADS; PyTorch reads OMP_NUM_THREADS).
    env = os.environ.get
    for r in data["rows"]:
        allowed = env("OMP_NUM_THREADS") if r["role"] == "torch" else env("OPENBLAS_NUM_THREADS") or env("OMP_NUM_THREADS")
        if r["threads"] == 1:
            assert r["worker_threads"] == [1], r
        elif allowed:
            assert r["worker_threads"] == [int(allowed)], r
        elif (os.cpu_count() or 1) > 1:
            assert len(r["worker_threads"]) == 1 and r["worker_threads"][0] > 1, r
    assert (tmp_path / "latest.png").stat().st_size > 10_000


def test_quick_bench_without_torch_says_what_it_skipped(tmp_path):
    # Also: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are dropped (together) for the workers, and said so.
    # The override is a kernel this CPU can run other than the one OpenBLAS picks here by itself
    # (asked of the machine, never assumed), so the workers' kernel shows whether it was dropped.
    default = nbval_blas.default_kernel()
    others = nbval_blas.other_kernels(1)
    if not others:
        pytest.skip(f"this CPU runs no OpenBLAS kernel other than its default {default}")
    env = dict(os.environ, OPENBLAS_CORETYPE=others[0], OPENBLAS_L2_SIZE="262144")
    out = run_quick(tmp_path, "--without-torch", "--no-memory", "--no-plot", env=env)
    assert "removed from the workers' environment" in out
    assert "OPENBLAS_CORETYPE" in out and "OPENBLAS_L2_SIZE" in out
    assert f"kernel {others[0]} " not in out, f"the workers ran the override {others[0]}"
    assert f"kernel {default} " in out, f"the workers did not run the machine's own kernel {default}:\n{out[-2000:]}"
    header, rows = table_rows(out)
    assert header == COLUMNS
    labels = [r[0] for r in rows]
    assert set(labels) == set(NUMPY_ROWS)
    assert "skipping the PyTorch rows" in out
    for label in TORCH_ROWS:
        assert label in out.split("skipping the PyTorch rows")[1]       # named among the skipped
    assert all(r[5] == "—" for r in rows)                               # no ratio without PyTorch


def _run_module():
    spec = importlib.util.spec_from_file_location("bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_shows_the_latest_full_run():
    # `make bench` rewrites the README's table from bench/results/latest.md; a hand edit of
    # either, or a latest.md without the README updated, fails here.
    run = _run_module()
    with open(os.path.join(ROOT, "bench", "results", "latest.md")) as f:
        latest = f.read()
    with open(run.README) as f:
        readme = f.read()
    assert readme.count(run.README_START) == 1 and readme.count(run.README_END) == 1
    shown = readme.split(run.README_START, 1)[1].split(run.README_END, 1)[0].strip()
    assert shown == run.readme_block(latest)
    assert "| NumPy flash_attention | b=8 h=8 n=512 d=64 |" in shown and "Targets:" in shown


def test_update_readme_replaces_only_the_marked_block(quick_run, tmp_path):
    run = _run_module()
    latest = (quick_run[1] / "latest.md").read_text()
    assert "Targets:" in latest
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{run.README_START}\nold table\n{run.README_END}\nafter\n")
    assert run.update_readme(latest, str(readme))
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith("after\n") and "old table" not in text
    assert run.readme_block(latest) in text
    readme.write_text("no markers\n")
    assert not run.update_readme(latest, str(readme)) and readme.read_text() == "no markers\n"
