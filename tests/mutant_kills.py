"""Over how many grading seeds the hidden tests catch each mutant of tests/mutants (not a test module).

A mutant is caught on a seed when a hidden block of its own exercise fails on that seed: the test
cells that follow the replaced solution cell in the source notebook, before the next solution cell
(``surviving_seeds`` in tests/test_hidden_tests_catch_mutants.py, which `make test` runs for 08-11 on
its KILL_SEEDS). Alternatives (correct implementations of another style) and the independent
students of tests/fixtures/independent_solutions.py, exercise by exercise, must pass on every seed.

    .venv/bin/python tests/mutant_kills.py 08_decoder 09_llm --seeds 20      # seeds 1000..1019

Prints one line per mutant, alternative and independent exercise; exits 1 when any is wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "fixtures"))
from test_hidden_tests_catch_mutants import MUTANT_FILES, load_mutants, surviving_seeds  # noqa: E402


def independent_students(name: str) -> list[dict]:
    """tests/fixtures/independent_solutions.py's students of this notebook: {grade_id: their cell} each."""
    import similarity_class

    if name not in similarity_class.INDEPENDENT:
        return []
    return [similarity_class.independent_cells(name, i) for i in range(len(similarity_class.INDEPENDENT_STUDENTS))]


def mutants_of(name: str, kind: str = "MUTANTS") -> dict:
    path = next(p for p in MUTANT_FILES if p.stem == name)
    return load_mutants(path, kind)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--first", type=int, default=1000, help="the first seed (default 1000)")
    parser.add_argument("--no-independent", action="store_true", help="skip the independent students")
    args = parser.parse_args(argv)
    seeds = range(args.first, args.first + args.seeds)
    bad = 0
    for name in args.notebooks:
        start = time.perf_counter()
        ref = surviving_seeds(name, {}, seeds)
        print(f"{name}: the published solution passes on {len(ref)}/{len(seeds)} seeds "
              f"{seeds.start}..{seeds.stop - 1} ({time.perf_counter() - start:.1f} s)")
        bad += len(ref) != len(seeds)
        for kind in ("MUTANTS", "ALTERNATIVES"):
            for description, replacements in mutants_of(name, kind).items():
                t = time.perf_counter()
                survived = surviving_seeds(name, replacements, seeds)
                caught = len(seeds) - len(survived)
                ok = (caught == len(seeds)) if kind == "MUTANTS" else (caught == 0)
                bad += not ok
                what = "mutant caught" if kind == "MUTANTS" else "alternative rejected"
                print(f"  {'ok ' if ok else 'BAD'} {what} on {caught:2d}/{len(seeds)} seeds "
                      f"({time.perf_counter() - t:4.1f} s)  {description}")
        for i, cells in enumerate([] if args.no_independent else independent_students(name)):
            t = time.perf_counter()
            for exercise, cell in cells.items():          # each exercise alone: which one a seed rejects
                rejected = len(seeds) - len(surviving_seeds(name, {exercise: cell}, seeds))
                bad += rejected > 0
                print(f"  {'ok ' if not rejected else 'BAD'} independent student {i + 1} rejected on "
                      f"{rejected:2d}/{len(seeds)} seeds  {exercise}")
            print(f"  ({time.perf_counter() - t:.1f} s for independent student {i + 1})")
        print(f"{name}: {time.perf_counter() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
