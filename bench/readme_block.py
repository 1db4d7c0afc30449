"""Copy a benchmark's printed result into bench/README.md, between ``<!-- NAME-table:start -->`` and
``<!-- NAME-table:end -->``, as a code block: ``make bench-train`` and ``make bench-lora`` call it after their run,
so the page shows the run in ``results/`` and nothing typed by hand (tests/test_bench_readme.py checks it).

Usage::

    .venv/bin/python bench/readme_block.py train bench/results/train_step.txt
"""

from __future__ import annotations

import os
import sys

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"


def as_block(result: str) -> str:
    """A run's printed text as the README shows it: a fenced code block."""
    return f"```text\n{result.strip()}\n```"


def shown(name: str, path: str = README) -> str | None:
    """What the README holds between ``name``'s markers (None without them)."""
    start, end = markers(name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(start) != 1 or text.count(end) != 1:
        return None
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def replace(name: str, result: str, path: str = README) -> None:
    """Put ``as_block(result)`` between ``name``'s markers; a missing marker is an error."""
    start, end = markers(name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"{path} must hold {start} and {end} once each")
    head, rest = text.split(start, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{start}\n{as_block(result)}\n{end}{rest.split(end, 1)[1]}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[2], encoding="utf-8") as f:
        replace(sys.argv[1], f.read())
