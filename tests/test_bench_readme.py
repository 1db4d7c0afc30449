"""bench/README.md shows the committed runs of `make bench-train`, `make bench-lora` and `make bench-tokens` (results/*.txt) between
its markers, as bench/readme_block.py writes them: a hand edit of either, or a new run not copied, fails here."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("readme_block", os.path.join(ROOT, "bench", "readme_block.py"))
readme_block = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_block)


@pytest.mark.parametrize("name, result", [("train", "train_step.txt"), ("lora", "lora_step.txt"),
                                          ("tokens", "tokenizer_speed.txt")])
def test_readme_shows_the_committed_run(name, result):
    with open(os.path.join(ROOT, "bench", "results", result), encoding="utf-8") as f:
        run = f.read()
    assert readme_block.shown(name) == readme_block.as_block(run), (
        f"bench/README.md's {name} table is not results/{result}: run `make bench-{name}` "
        f"or `.venv/bin/python bench/readme_block.py {name} bench/results/{result}`")


def test_replace_writes_between_the_markers_and_refuses_without_them(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("intro\n<!-- x-table:start -->\nold\n<!-- x-table:end -->\nafter\n", encoding="utf-8")
    readme_block.replace("x", "new run\n", str(page))
    assert page.read_text(encoding="utf-8") == "intro\n<!-- x-table:start -->\n```text\nnew run\n```\n<!-- x-table:end -->\nafter\n"
    assert readme_block.shown("x", str(page)) == "```text\nnew run\n```"
    page.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="must hold"):
        readme_block.replace("x", "run", str(page))
