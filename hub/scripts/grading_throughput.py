"""Grading throughput on this machine and on a Dask cluster, with the grades compared.

    sudo .venv/bin/python hub/scripts/grading_throughput.py [--copies 4] [--repeats 1]

Builds a class of 3 x COPIES submissions of notebook 01 (the demo class's correct, stub and
wrong-scale notebooks under fresh student names), then grades it with `python -m grader
grade` four ways: locally with 1 and 2 workers, and with --scheduler on a LocalCluster of
1 and 2 worker processes (1 thread each) on 127.0.0.1. Prints submissions per minute,
seconds per submission, the Dask overhead per submission (Dask minus local, same number of
workers) and whether every grade table is identical to the first. Needs root, like grading.
Timings depend on the machine's load: run it on a quiet machine, read medians.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "tests" / "fixtures" / "demo_class" / "submitted"
KINDS = ["alice_correct", "bob_stub", "carol_wrong_scale"]


def make_class(folder: Path, copies: int) -> int:
    for k in range(copies):
        for kind in KINDS:
            shutil.copytree(DEMO / kind, folder / f"s{k:03d}_{kind}")
    return copies * len(KINDS)


def grade(submitted: Path, grades: Path, *extra: str) -> float:
    env = dict(os.environ, COURSE_GRADING_SEED="7", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "lib")]))
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "grader", "--course", str(ROOT), "grade", "--submitted", str(submitted),
                    "--grades", str(grades), "--assignment", "01_attention", "--quiet", *extra],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    from distributed import LocalCluster

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "lib")])   # the workers import grader
    sys.path.insert(0, str(ROOT))
    work = Path(tempfile.mkdtemp(prefix="tc-throughput-"))
    try:
        n = make_class(work / "submitted", args.copies)
        times: dict[str, list[float]] = {}
        tables: dict[str, str] = {}
        for r in range(args.repeats):
            for workers in (1, 2):
                label = f"local, {workers} worker{'s' * (workers > 1)}"
                out = work / f"local{workers}-{r}"
                times.setdefault(label, []).append(grade(work / "submitted", out, "--workers", str(workers)))
                tables[label] = (out / "grades.csv").read_text()
                with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
                    label = f"Dask LocalCluster, {workers} worker process{'es' * (workers > 1)}"
                    out = work / f"dask{workers}-{r}"
                    times.setdefault(label, []).append(
                        grade(work / "submitted", out, "--scheduler", cluster.scheduler_address))
                    tables[label] = (out / "grades.csv").read_text()
        first = next(iter(tables.values()))
        print(f"{n} submissions of 01_attention, median of {args.repeats} run(s), wall clock of `python -m grader grade`")
        print(f"{'how':42s} {'seconds':>8s} {'s/sub':>7s} {'subs/min':>9s}  grades identical to local-1")
        med = {label: statistics.median(v) for label, v in times.items()}
        for label, s in med.items():
            print(f"{label:42s} {s:8.1f} {s / n:7.2f} {60 * n / s:9.1f}  {tables[label] == first}")
        for workers in (1, 2):
            local = med[f"local, {workers} worker{'s' * (workers > 1)}"]
            dask = med[f"Dask LocalCluster, {workers} worker process{'es' * (workers > 1)}"]
            print(f"Dask overhead with {workers} worker(s): {(dask - local) / n * 1000:+.0f} ms per submission")
        for label, table in tables.items():
            if table != first:
                print(f"rows of '{label}' that differ from the first run:")
                print("\n".join(difflib.unified_diff(first.splitlines(), table.splitlines(), lineterm="", n=0)))
        print(json.dumps({"submissions": n, "seconds": times, "identical": all(t == first for t in tables.values())}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
