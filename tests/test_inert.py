"""What a student wrote is made inert before an instructor's browser shows it (grader/trusted/inert.py).

The browser test (tests/test_hub_browser.py) sends these payloads through the real hub and
opens every instructor view; here the same payloads, quickly, against the module itself:

* every payload that nbconvert's renderer (Formgrader's) would turn into active markup is
  flagged, and what is shown instead holds nothing off the allowlist;
* the course's own 516 markdown cells (notebooks, exercises, solutions) pass untouched, as do
  their outputs: a student's ordinary answer is shown as written;
* a notebook with every payload (markdown, raw cells, attachments, metadata, outputs of every
  type, widget state) comes out with only allowlisted HTML, text and raster images, and says
  what it changed; a second pass changes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bleach._vendor import html5lib  # noqa: E402

from grader.trusted import inert  # noqa: E402
import xss_payloads  # noqa: E402

BASE, INSTRUCTOR = "http://127.0.0.1:9", "teacher"
MARKDOWN = xss_payloads.markdown_payloads(BASE, INSTRUCTOR)


@pytest.mark.parametrize("pid", sorted(MARKDOWN))
def test_markdown_payload_is_shown_inert(pid):
    source = MARKDOWN[pid]
    raw = inert.render_markdown(source)                 # what Formgrader rendered before
    shown = inert.safe_markdown_html(source)
    assert inert.html_problems(shown) == [], (pid, shown[:300])
    if inert.html_problems(raw) or "\\href" in source:
        assert inert.markdown_problems(source), f"{pid}: active markup not flagged: {raw[:300]}"
        assert shown != raw and inert.NOTE.strip("*") in shown
        text = "".join(html5lib.parseFragment(shown, treebuilder="etree").itertext())
        assert source in text, "the instructor still reads what the student wrote, as text"
    else:                                               # mistune escaped it already: shown as written
        assert shown == raw, pid


def test_every_payload_is_planted():
    nb = xss_payloads.plant({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, BASE, INSTRUCTOR)
    sources = {c["source"] for c in nb["cells"] if c["cell_type"] == "markdown"}
    assert set(MARKDOWN.values()) <= sources
    text = json.dumps(nb)
    for pid in set(xss_payloads.NOTEBOOK_IDS) - {"attachment-svg"}:   # the id inside each script (not base64)
        assert "".join(f"%{b:02x}" for b in f"'{pid}'".encode()) in text, pid


def _shown_html(nb: dict) -> list[str]:
    """Every piece of a notebook a browser would parse as HTML (markdown rendered, html/markdown outputs)."""
    out = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            out.append(inert.render_markdown(source, cell.get("attachments")))
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "text/html" in data:
                out.append("".join(data["text/html"]) if isinstance(data["text/html"], list) else data["text/html"])
            if "text/markdown" in data:
                out.append(inert.render_markdown(data["text/markdown"]))
    return out


def test_a_notebook_with_every_payload_comes_out_inert():
    nb = xss_payloads.plant({"cells": [{"cell_type": "markdown", "metadata": {"nbgrader": {
        "grade": True, "solution": True, "grade_id": "q1", "points": 2}}, "source": "my answer"}],
        "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}, BASE, INSTRUCTOR)
    clean, changes = inert.inert_notebook(nb)
    assert changes and all(isinstance(c, str) for c in changes)
    for html in _shown_html(clean):
        assert inert.html_problems(html) == [], html[:300]
    mimes = {m for c in clean["cells"] for o in c.get("outputs", []) for m in o.get("data", {})}
    assert mimes <= {"text/plain", "application/json", "image/png", "image/jpeg", "image/gif"}, mimes
    assert "widgets" not in clean["metadata"]
    assert all("raw_mimetype" not in c["metadata"] for c in clean["cells"] if c["cell_type"] == "raw")
    assert all(set(b) <= {"image/png", "image/jpeg", "image/gif"}
               for c in clean["cells"] for b in c.get("attachments", {}).values())
    grade_ids = [c["metadata"]["nbgrader"]["grade_id"] for c in clean["cells"] if "nbgrader" in c["metadata"]]
    assert grade_ids == ["q1"], grade_ids                     # the markup grade id is gone, the real one stays
    assert clean["cells"][0]["source"] != "my answer"         # the written answer now carries md-img-onerror: as text
    assert MARKDOWN["md-img-onerror"] in clean["cells"][0]["source"]
    again, more = inert.inert_notebook(clean)
    assert more == [] and again == clean, more                 # idempotent
    # streams and errors stay (nbconvert and JupyterLab escape them); the text a student printed is kept
    kinds = [o["output_type"] for c in clean["cells"] for o in c.get("outputs", [])]
    assert "stream" in kinds and "error" in kinds


@pytest.mark.parametrize("folder", ["notebooks", "exercises", "solutions"])
def test_the_course_own_notebooks_pass_untouched(folder):
    """Ordinary markdown -- headings, maths, tables, code, links to theory.md, <details> hints -- is kept."""
    files = sorted((ROOT / folder).glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if not files or not all(f.is_file() for f in files):
        pytest.skip(f"{folder}/ is not readable here")
    cells = 0
    for path in files:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except PermissionError:
            pytest.skip(f"{folder}/ is root-only here (a hub host)")
        clean, changes = inert.inert_notebook(nb)
        assert changes == [], (path.name, changes[:5])
        assert clean == nb
        cells += sum(c["cell_type"] == "markdown" for c in nb["cells"])
    assert cells > 100


def test_inert_file_rewrites_only_what_changed(tmp_path):
    plain = tmp_path / "plain.ipynb"
    plain.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Hi $x<1$"}],
                                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    before = plain.stat().st_mtime_ns, plain.read_bytes()
    assert inert.inert_file(plain) == []
    assert (plain.stat().st_mtime_ns, plain.read_bytes()) == before
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": MARKDOWN["md-svg-onload"]}],
                               "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    changes = inert.inert_file(bad)
    assert changes and "<svg>" in changes[0]
    assert inert.html_problems(inert.render_markdown(json.loads(bad.read_text())["cells"][0]["source"])) == []
    junk = tmp_path / "junk.ipynb"
    junk.write_bytes(b"\xff not json")
    assert inert.inert_file(junk) == [] and junk.read_bytes() == b"\xff not json"
