#!/usr/bin/env python
"""Build the reader-facing website of the course, fully offline.

The site is a Jupyter Book 1.x (Sphinx + MyST-NB) book made of

* ``site/intro.md``: the landing page (the syllabus),
* every ``solutions/<NN_name>/*.ipynb``, in the order of the numeric prefix,
  rendered from its *stored* outputs (nothing is executed),
* ``theory.md``, the derivations: the copy that sits next to the notebooks
  in ``solutions/`` (``notebooks/theory.md`` or a top-level ``theory.md`` when
  that copy is missing).

Nothing is built in place: the inputs are copied into ``<out>/src`` with the
repository's layout kept (``solutions/01_attention/01_attention.ipynb``,
``solutions/theory.md``), so the relative links the notebooks use in Jupyter
(``../theory.md#12-softmax-and-the-max-shift``) resolve on the site too.
``_toc.yml`` is generated there from what exists, MathJax 3 is copied there
from the ``django-static-mathjax`` wheel (a plain copy of the MathJax 3
distribution, no Django needed) and Sphinx writes the site to ``<out>/html``.

Usage::

    python site/build.py              # always rebuild (what `make site` does)
    python site/build.py --if-stale   # rebuild only when an input changed
    python site/build.py --check      # exit 0 when up to date, 1 when stale

A successful build writes ``<out>/html/.site-build.json`` with a fingerprint
of every input, which is how ``--if-stale`` and the browser test know whether
the built site is current.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
SITE = Path(__file__).resolve().parent
REPO = SITE.parent
DEFAULT_OUT = SITE / "_build"
STAMP = ".site-build.json"

MATHJAX_DIST = "django-static-mathjax"
MATHJAX_ENTRY = "tex-mml-chtml.js"  # must match mathjax_path in _config.yml
STATIC_DIR = "site_assets"  # html_static_path in _config.yml; never `_static`
ASSET_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}
SITE_INPUTS = ["_config.yml", "intro.md", "course_site_ext.py", "build.py"]
# Where theory.md is looked for, first found wins; it is always published as
# solutions/theory.md, next to the notebooks that link to it as ../theory.md.
THEORY_SOURCES = ["solutions/theory.md", "notebooks/theory.md", "theory.md"]
THEORY_DOC = "solutions/theory"


# --------------------------------------------------------------------------- inputs
def _order_key(path: Path) -> tuple:
    folder = path.parent.name
    match = re.match(r"(\d+)", folder)
    number = int(match.group(1)) if match else 10**9
    # the notebook named after its folder first, then any others by name
    return (number, folder, path.stem != folder, path.name)


def find_notebooks(root: Path) -> list[Path]:
    """Every solutions/<NN_name>/*.ipynb, ordered by the numeric prefix."""
    found = [
        p
        for p in (root / "solutions").glob("*/*.ipynb")
        if ".ipynb_checkpoints" not in p.parts and not p.name.startswith(".")
    ]
    return sorted(found, key=_order_key)


def notebook_assets(notebook: Path) -> list[Path]:
    """Image files beside a notebook (markdown cells may reference them)."""
    folder = notebook.parent
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in ASSET_SUFFIXES
        and ".ipynb_checkpoints" not in p.parts
    )


def mathjax_es5() -> Path:
    """The es5/ folder of MathJax 3 inside the installed django-static-mathjax."""
    try:
        dist = importlib.metadata.distribution(MATHJAX_DIST)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(
            f"site/build.py: the Python package {MATHJAX_DIST} (MathJax 3, served "
            "from the site itself) is not installed: run `make site-deps`."
        )
    for f in dist.files or []:
        if f.as_posix().endswith(f"static/mathjax/es5/{MATHJAX_ENTRY}"):
            return Path(dist.locate_file(f)).parent
    sys.exit(f"site/build.py: {MATHJAX_ENTRY} not found in {MATHJAX_DIST}")


def find_theory(root: Path) -> Path | None:
    for name in THEORY_SOURCES:
        if (root / name).is_file():
            return root / name
    return None


def inputs(root: Path) -> list[tuple[str, Path]]:
    """(name in the source folder, file) for every input of the build."""
    items = [(name, SITE / name) for name in SITE_INPUTS]
    items += [
        (f"{STATIC_DIR}/{p.relative_to(SITE / 'assets').as_posix()}", p)
        for p in sorted((SITE / "assets").rglob("*"))
        if p.is_file()
    ]
    theory = find_theory(root)
    if theory is not None:
        items.append((f"{THEORY_DOC}.md", theory))
    for nb in find_notebooks(root):
        items.append((nb.relative_to(root).as_posix(), nb))
        for asset in notebook_assets(nb):
            items.append((asset.relative_to(root).as_posix(), asset))
    return items


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def fingerprint(root: Path) -> str:
    h = hashlib.sha256()
    for dist in ("jupyter-book", "sphinx", "myst-nb", "sphinx-book-theme", MATHJAX_DIST):
        h.update(f"{dist}=={_version(dist)}\n".encode())
    for name, path in inputs(root):
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def read_stamp(out: Path) -> dict | None:
    try:
        return json.loads((out / "html" / STAMP).read_text())
    except (OSError, ValueError):
        return None


def is_current(root: Path = REPO, out: Path = DEFAULT_OUT) -> bool:
    stamp = read_stamp(out)
    return bool(stamp) and stamp.get("fingerprint") == fingerprint(root)


# --------------------------------------------------------------------------- assembly
def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML scalar


def write_toc(src: Path, chapters: list[str], theory: str | None) -> Path:
    lines = ["# Generated by site/build.py: do not edit.", "format: jb-book", "root: intro"]
    parts = []
    if chapters:
        parts.append(("The course, notebook by notebook", chapters))
    if theory:
        parts.append(("Reference", [theory]))
    if parts:
        lines.append("parts:")
        for caption, files in parts:
            lines.append(f"  - caption: {_yaml_str(caption)}")
            lines.append("    chapters:")
            lines += [f"      - file: {_yaml_str(f)}" for f in files]
    toc = src / "_toc.yml"
    toc.write_text("\n".join(lines) + "\n")
    return toc


LOCAL_PAGE_LINK = re.compile(
    r"\[([^\]\n]+)\]\((?![a-z]+:|#)([^)#\s]+\.(?:ipynb|md))(#[^)\s]*)?\)"
)


def unlink_missing_pages(page: Path) -> list[str]:
    """Turn the links of the landing page to pages that do not exist (yet) into text.

    The landing page lists the whole syllabus; a notebook that has not been
    published yet is named without a (dead) link.
    """
    missing: list[str] = []

    def replace(m: re.Match) -> str:
        if (page.parent / m.group(2)).is_file():
            return m.group(0)
        missing.append(m.group(2))
        return f"{m.group(1)} *(not published yet)*"

    text = page.read_text()
    page.write_text(LOCAL_PAGE_LINK.sub(replace, text))
    return missing


def copy_mathjax(dest: Path) -> None:
    """Copy MathJax 3 (es5/) without the combined bundles the site does not load.

    Kept: the one entry point, and every component it may load lazily
    (TeX extensions, CHTML fonts, the SVG renderer and the accessibility
    tools the MathJax menu offers), so no request 404s.
    """
    es5 = mathjax_es5()

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) == es5:
            return [n for n in names if n.endswith(".js") and n != MATHJAX_ENTRY]
        return []

    shutil.copytree(es5, dest, ignore=ignore)
    licence = es5.parent / "LICENSE"
    if licence.is_file():
        shutil.copy2(licence, dest / "LICENSE")


def assemble(root: Path, src: Path) -> dict:
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for name, path in inputs(root):
        if name == "build.py":
            continue
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    copy_mathjax(src / STATIC_DIR / "mathjax")
    notebooks = find_notebooks(root)
    chapters = [nb.relative_to(root).with_suffix("").as_posix() for nb in notebooks]
    theory = THEORY_DOC if find_theory(root) is not None else None
    write_toc(src, chapters, theory)
    unpublished = unlink_missing_pages(src / "intro.md")
    return {"notebooks": chapters, "theory": theory, "unpublished": unpublished}


# --------------------------------------------------------------------------- build
class _Tee(io.TextIOBase):
    """Write to several streams: Sphinx's warnings are shown and recorded."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, s: str) -> int:
        for stream in self.streams:
            stream.write(s)
        return len(s)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def isatty(self) -> bool:
        return False


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _shown(path: Path) -> str:
    cwd = Path.cwd()
    return str(path.relative_to(cwd) if path.is_relative_to(cwd) else path)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


@contextlib.contextmanager
def _build_lock(out: Path):
    """One build at a time per build folder (make site, make serve and the
    browser test may run at once in one work tree)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(
    root: Path = REPO, out: Path = DEFAULT_OUT, *, verbose: bool = False, if_stale: bool = False
) -> dict | None:
    """Build the site into <out>/html; with if_stale, only when it is not current."""
    out = out.resolve()
    with _build_lock(out):
        if if_stale and is_current(root, out):
            print(f"site: up to date ({_shown(out / 'html')})")
            return read_stamp(out)
        return _build(root, out, verbose=verbose)


def _build(root: Path, out: Path, *, verbose: bool) -> dict:
    from jupyter_book.sphinx import build_sphinx  # imported late: it is slow

    src, html = out / "src", out / "html"
    # Sphinx writes a new folder that replaces html/ only once complete, so a
    # server or a test reading html/ meanwhile never sees half a site.
    new = out / "html.new"
    print_fp = fingerprint(root)
    content = assemble(root, src)
    if new.exists():
        shutil.rmtree(new)
    if not content["notebooks"]:
        print(
            "site/build.py: warning: no notebook found in solutions/*/*.ipynb; "
            "building the landing page only.",
            file=sys.stderr,
        )

    if not sys.stderr.isatty():
        from sphinx.util.console import nocolor

        nocolor()  # plain warnings in logs and in the recorded list
    log, warnings_log = io.StringIO(), io.StringIO()
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(log)
    with sink, contextlib.redirect_stderr(_Tee(warnings_log, sys.stderr)):
        result = build_sphinx(
            src,
            new,
            use_external_toc=True,
            noconfig=True,
            path_config=str(src / "_config.yml"),
            confoverrides={
                "external_toc_path": (src / "_toc.yml").as_posix(),
                "latex_individualpages": False,
            },
            doctreedir=out / ".doctrees",
            builder="html",
            freshenv=True,
            quiet=not verbose,
        )
    if result != 0:
        sys.stdout.write(log.getvalue())
        raise SystemExit(f"site/build.py: Sphinx failed (exit status {result})")

    warnings = [
        re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        for line in warnings_log.getvalue().splitlines()
        if "WARNING" in line or "ERROR" in line
    ]
    pages = 1 + len(content["notebooks"]) + int(bool(content["theory"]))
    html_files = sorted(
        p.relative_to(new).as_posix()
        for p in new.rglob("*.html")
        if p.relative_to(new).parts[0] != "_static"
    )
    seconds = time.perf_counter() - T_START
    cpu_seconds = time.process_time()  # robust to a busy machine, unlike wall time
    info = {
        "fingerprint": print_fp,
        "pages": pages,
        "html_files": html_files,
        "notebooks": content["notebooks"],
        "theory": content["theory"],
        "unpublished": content["unpublished"],
        "warnings": warnings,
        "build_seconds": round(seconds, 2),
        "build_cpu_seconds": round(cpu_seconds, 2),
        "size_bytes": _size(new),
        "mathjax": _version(MATHJAX_DIST),
    }
    (new / STAMP).write_text(json.dumps(info, indent=2) + "\n")
    old = out / f"html.old.{os.getpid()}"
    if html.exists():
        html.rename(old)
    new.rename(html)
    shutil.rmtree(old, ignore_errors=True)
    print(
        f"site: {pages} pages ({len(content['notebooks'])} notebook(s)"
        f"{', theory' if content['theory'] else ''}, landing page; "
        f"{len(html_files)} HTML files with search and index) "
        f"built in {seconds:.1f} s ({cpu_seconds:.1f} s CPU), {_human(info['size_bytes'])}, "
        f"{len(warnings)} warning(s) -> {_shown(html)}"
    )
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="repository root (default: this repository)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="build folder (default: site/_build)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--if-stale", action="store_true", help="build only when an input changed")
    mode.add_argument("--check", action="store_true", help="exit 1 when the built site is stale")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Sphinx's output")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    if args.check:
        current = is_current(root, args.out)
        print("site: up to date" if current else "site: stale or not built")
        return 0 if current else 1
    build(root, args.out, verbose=args.verbose, if_stale=args.if_stale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
