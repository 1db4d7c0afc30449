"""Sphinx extension of the course website (loaded through _config.yml).

Two reader-facing fixes that configuration cannot make (the maths themselves are typeset at
build time by site/prerender_math.cjs, which replaces the MathJax scripts Sphinx adds to the pages
that have equations):

* **Plain-text titles.** A title with maths (notebook 02: "why divide by $\\sqrt{d_k}$") would
  show raw TeX in the browser tab and in search results, which cannot typeset. Maths in a
  title is replaced by its Unicode reading (``\\sqrt{d_k}`` -> ``√d_k``) when the page is read.
* **No student instructions on the solutions pages.** The notebooks are written for students
  ("Cells that say `# YOUR CODE HERE` are yours", "graded by hand"); the site shows the
  executed solutions, so those sentences are taken out of the notebooks' markdown when the
  page is read (the files in solutions/ are not changed), and so are the empty scratch cells (tagged
  ``scratch``) where a written question lets the student compute.
"""

from __future__ import annotations

import json
import re

from docutils import nodes

# The sentences that speak to a student working on the exercise, not to a reader of the solution.
STUDENT_ONLY = [
    # (any line breaks between the words: a space in these patterns matches any run of white space)
    (re.compile(r"(?:How to work through it: )?(?:[Rr]un the cells|Work) from the top\. Cells that say "
                r"`# YOUR CODE HERE` are yours; the cell after each one (?:holds tests that print the "
                r"relative error of your result against the expected values|holds tests that compare your result with "
                r"the expected values and print the bound each comparison passed \(not the error itself, whose last "
                r"digits change from machine to machine\)|tests it)\.\s*".replace(" ", r"\s+")), ""),
    (re.compile(r"\(written answer, graded by hand\)"), "(written answer)"),
    (re.compile(r" ?\(graded by hand\)"), ""),
]

TEX_TO_TEXT = [
    (re.compile(r"\\sqrt\{([^{}]*)\}"), r"√\1"),
    (re.compile(r"\\(?:text|mathrm|operatorname)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"_\{([^{}]*)\}"), r"_\1"),
    (re.compile(r"\\cdot"), "·"),
    (re.compile(r"\\times"), "×"),
    (re.compile(r"\\infty"), "∞"),
    (re.compile(r"\\(alpha|beta|gamma|epsilon|varepsilon|mu|sigma|omega)"),
     lambda m: dict(alpha="α", beta="β", gamma="γ", epsilon="ε", varepsilon="ε", mu="μ",
                    sigma="σ", omega="ω")[m.group(1)]),
    (re.compile(r"[{}\\]"), ""),
]


def tex_as_text(tex: str) -> str:
    for pattern, repl in TEX_TO_TEXT:
        tex = pattern.sub(repl, tex)
    return tex


def drop_student_instructions(app, docname, source):
    """``source-read``: edit the markdown cells of a solutions notebook before it is parsed."""
    if not docname.startswith("solutions/") or not source[0].lstrip().startswith("{"):
        return
    notebook = json.loads(source[0])
    notebook["cells"] = [c for c in notebook.get("cells", []) if "scratch" not in c.get("metadata", {}).get("tags", [])]
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"])
            for pattern, repl in STUDENT_ONLY:
                text = pattern.sub(repl, text)
            cell["source"] = text
    source[0] = json.dumps(notebook)


def plain_text_titles(app, doctree):
    """``doctree-read``: maths inside a section title becomes text."""
    for title in doctree.findall(nodes.title):
        for math in list(title.findall(nodes.math)):
            math.replace_self(nodes.Text(tex_as_text(math.astext())))


def setup(app):
    app.connect("source-read", drop_student_instructions)
    app.connect("doctree-read", plain_text_titles, priority=100)   # before Sphinx records the titles
    return {"parallel_read_safe": True, "parallel_write_safe": True}
