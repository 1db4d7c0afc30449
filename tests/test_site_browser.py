"""The course website, served on 127.0.0.1 and read by a real headless browser.

The site is built by ``site/build.py`` (``make site``); the session fixture
below rebuilds it when it is missing or stale. Every page is then opened in
Debian's Chromium, driven by Playwright, and checked as a reader would see it:

* no console error and no uncaught exception;
* every image loaded (``naturalWidth > 0``);
* maths rendered: every ``.math`` element holds a MathJax container, and no
  MathJax error node exists;
* every internal link resolves, to a file of the site and, for ``#...``, to
  an element with that id;
* no request leaves 127.0.0.1: every other request is blocked and recorded;
* nothing the page asked for failed (no 4xx/5xx, no failed request).

A full-page screenshot of each page is saved to .artifacts/site-screenshots/.

Without Chromium (``make browser-deps``: ``apt-get install chromium``) or the
Python package playwright (``make site-deps``) the browser tests skip, saying
so. Never run ``playwright install``: it downloads a browser build, which is
not possible here; the tests use /usr/bin/chromium through executable_path.

Developer knobs: COURSE_SITE_ROOT (a repository root whose solutions/ and
theory.md to build, default this repository), COURSE_SITE_OUT (its build
folder, default site/_build), CHROMIUM (the browser, default /usr/bin/chromium).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("COURSE_SITE_ROOT", REPO)).resolve()
OUT = Path(os.environ.get("COURSE_SITE_OUT", REPO / "site" / "_build")).resolve()
HTML = OUT / "html"
ARTEFACTS = REPO / ".artifacts" / "site-screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
PAGE_TIMEOUT_MS = 120_000
INSTALL_BROWSER = (
    "install it with `make browser-deps` (runs `apt-get install -y chromium`); "
    "never `playwright install`, which downloads a browser and fails offline"
)


def _load_build_module():
    # `site` is a standard-library module name: load site/build.py by path.
    spec = importlib.util.spec_from_file_location(
        "course_site_build", REPO / "site" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_mod = _load_build_module()


def expected_pages() -> list[str]:
    """The HTML pages the site must have, known without building it."""
    pages = ["index.html", "intro.html"]
    pages += [
        nb.relative_to(ROOT).with_suffix(".html").as_posix()
        for nb in build_mod.find_notebooks(ROOT)
    ]
    if build_mod.find_theory(ROOT) is not None:
        pages.append(f"{build_mod.THEORY_DOC}.html")
    return pages + ["search.html", "genindex.html"]


PAGES = expected_pages()


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def built_site() -> dict:
    """The built site, (re)built with site/build.py if missing or stale."""
    if importlib.util.find_spec("jupyter_book") is None:
        pytest.skip("jupyter-book is not installed: run `make site-deps`")
    if not build_mod.is_current(ROOT, OUT):
        # in a child process, as `make site` runs it: Sphinx and docutils keep
        # global state that has no business in the test process
        subprocess.run(
            [sys.executable, str(REPO / "site" / "build.py"), "--if-stale",
             "--root", str(ROOT), "--out", str(OUT)],
            check=True,
        )
    info = build_mod.read_stamp(OUT)
    assert info, f"site/build.py left no {build_mod.STAMP} in {HTML}"
    return info


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="session")
def server(built_site):
    """The built site served by http.server on 127.0.0.1, on a free port."""
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(HTML))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"base": f"http://127.0.0.1:{httpd.server_port}/", "port": httpd.server_port}
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM}: {INSTALL_BROWSER}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the Python package playwright is not installed: run `make site-deps`")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    if ARTEFACTS.exists():
        shutil.rmtree(ARTEFACTS)
    ARTEFACTS.mkdir(parents=True)
    return ARTEFACTS


class Visit:
    """One page in a fresh browser context, with everything it did recorded."""

    def __init__(self, browser, server, path: str):
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.port = server["port"]
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        # generous: a long page (theory, hundreds of formulas) on a busy
        # 2-core machine takes a while to typeset and to screenshot
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        self.context.set_default_navigation_timeout(PAGE_TIMEOUT_MS)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on(
            "requestfailed",
            lambda req: self.failed.append(f"{req.url}: {req.failure}"),
        )
        self.page.on(
            "response",
            lambda resp: resp.status >= 400 and self.failed.append(f"{resp.status} {resp.url}"),
        )
        self.url = server["base"] + path

    def _route(self, route):
        url = urlsplit(route.request.url)
        if url.scheme in ("http", "https") and url.hostname == "127.0.0.1" and url.port == self.port:
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort("blockedbyclient")

    def _console(self, msg):
        if msg.type == "error":
            loc = msg.location or {}
            self.errors.append(f"console: {msg.text} ({loc.get('url', '')}:{loc.get('lineNumber', '')})")

    def open(self):
        self.page.goto(self.url, wait_until="load")
        self.settle()

    def settle(self):
        # MathJax 3 typesets after startup; wait for it and for anything it
        # loads lazily (TeX extensions, fonts), then for all images.
        self.page.evaluate(
            """async () => {
                if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
                    await MathJax.startup.promise;
                }
                await Promise.all([...document.images].map((img) => {
                    img.loading = 'eager';
                    return img.decode().catch(() => null);
                }));
                if (document.fonts) { await document.fonts.ready; }
            }"""
        )
        self.page.wait_for_load_state("networkidle")

    def close(self):
        self.context.close()


def _page_ids(html_file: Path) -> set[str]:
    text = html_file.read_text(errors="replace")
    return set(re.findall(r'\b(?:id|name)="([^"]+)"', text))


@functools.lru_cache(maxsize=None)
def _ids_cached(path: str) -> frozenset[str]:
    return frozenset(_page_ids(Path(path)))


def _resolve_internal(href: str, port: int) -> tuple[Path, str] | None:
    """The file and fragment an internal link points to (None: not internal)."""
    url = urlsplit(href)
    if url.scheme not in ("http", "https") or url.hostname != "127.0.0.1" or url.port != port:
        return None
    rel = unquote(url.path).lstrip("/")
    target = HTML / rel
    if rel == "" or target.is_dir():
        target = target / "index.html"
    return target, unquote(url.fragment)


# --------------------------------------------------------------------------- tests
def test_build_is_current_and_complete(built_site):
    assert set(PAGES) <= set(built_site["html_files"]), (
        "pages missing from the built site: "
        f"{sorted(set(PAGES) - set(built_site['html_files']))}"
    )
    # The budget is 30 s of wall time on an otherwise idle machine; CPU time is
    # what the build itself costs, whatever else the machine is doing.
    assert built_site["build_cpu_seconds"] < 30, (
        f"the site took {built_site['build_cpu_seconds']} s of CPU to build "
        f"({built_site['build_seconds']} s wall; budget: 30 s)"
    )


def test_build_has_no_unresolved_cross_references(built_site):
    """MyST drops the link of a reference it cannot resolve and only warns:
    a dead link (e.g. theory.md#a-section-that-does-not-exist) must fail."""
    unresolved = [
        w for w in built_site["warnings"]
        if re.search(r"xref|cross-reference|not found|undefined label|unknown document", w)
    ]
    assert not unresolved, "\n".join(unresolved)


def test_no_page_references_another_host(built_site):
    """Static check (no browser needed): no script, style, image or frame URL
    on another host, so no page can ask anything of one."""
    offenders = []
    attr = re.compile(
        r"<(script|link|img|iframe|source|video|audio|embed|object)\b[^>]*?"
        r"\b(?:src|href|data)=[\"']((?:https?:)?//[^\"']+)",
        re.I,
    )
    for page in built_site["html_files"]:
        for tag, url in attr.findall((HTML / page).read_text(errors="replace")):
            if tag.lower() == "link" and not re.search(r"\.(css|js|woff2?|ttf|png|svg|ico)\b", url):
                continue  # <link rel="canonical"> and the like are not requests
            offenders.append(f"{page}: <{tag}> {url}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("path", PAGES)
def test_page_in_browser(path, built_site, server, browser, screenshots):
    visit = Visit(browser, server, path)
    try:
        if path == "index.html":
            # index.html is a redirect to the landing page
            visit.page.goto(visit.url, wait_until="load")
            visit.page.wait_for_url("**/intro.html")
            visit.settle()
        else:
            visit.open()
        page = visit.page

        images = page.evaluate(
            """() => [...document.images].map((img) => ({
                src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0}))"""
        )
        maths = page.evaluate(
            """() => {
                const math = [...document.querySelectorAll('.math')];
                return {
                    mathjax: window.MathJax && MathJax.version || null,
                    total: math.length,
                    rendered: math.filter((el) => el.querySelector('mjx-container')).length,
                    containers: document.querySelectorAll('mjx-container').length,
                    errors: [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
                        .map((el) => el.getAttribute('data-mjx-error') || el.textContent),
                    raw: math.filter((el) => !el.querySelector('mjx-container'))
                        .map((el) => el.textContent.slice(0, 80)),
                };
            }"""
        )
        hrefs = page.evaluate(
            "() => [...document.querySelectorAll('a[href]')].map((a) => a.href)"
        )
        name = re.sub(r"[^A-Za-z0-9._-]+", "__", path.removesuffix(".html")) + ".png"
        page.screenshot(path=str(screenshots / name), full_page=True)
        current_path = urlsplit(page.url).path.lstrip("/") or "index.html"
    finally:
        visit.close()

    problems = []
    problems += visit.errors
    problems += [f"request left 127.0.0.1 (blocked): {u}" for u in visit.outside]
    problems += [f"failed request: {f}" for f in visit.failed]
    problems += [f"image not loaded: {img['src']}" for img in images if not img["ok"]]
    if maths["total"]:
        if not (maths["mathjax"] or "").startswith("3"):
            problems.append(f"maths on the page but MathJax 3 not loaded ({maths['mathjax']})")
        if maths["rendered"] != maths["total"]:
            problems.append(
                f"{maths['total'] - maths['rendered']} of {maths['total']} maths not rendered: "
                f"{maths['raw'][:5]}"
            )
    problems += [f"MathJax error: {e}" for e in maths["errors"]]

    for href in hrefs:
        resolved = _resolve_internal(href, server["port"])
        if resolved is None:
            continue
        target, fragment = resolved
        if not target.is_file():
            problems.append(f"broken link: {href}")
        elif fragment and target.suffix == ".html" and fragment not in _ids_cached(str(target)):
            problems.append(f"broken anchor: {href} (no id {fragment!r} in {target.relative_to(HTML)})")
    assert not problems, f"{current_path}:\n" + "\n".join(dict.fromkeys(problems))


def _nav_target(page: str, css_class: str) -> str | None:
    """Where the `previous`/`next` link of a built page points (site-relative)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((HTML / page).read_text(), "html.parser")
    link = soup.select_one(f"a.{css_class}")
    if link is None:
        return None
    target = (HTML / page).parent / link["href"].split("#")[0]
    return target.resolve().relative_to(HTML).as_posix()


def test_previous_next_navigation(built_site, server, browser):
    """Every page of the table of contents links to the one before and after
    it in course order, and following the links in the browser works."""
    chapters = ["intro.html"] + [
        f"{nb}.html" for nb in built_site["notebooks"]
    ] + ([f"{built_site['theory']}.html"] if built_site["theory"] else [])
    for i, page in enumerate(chapters):
        expected_prev = chapters[i - 1] if i > 0 else None
        expected_next = chapters[i + 1] if i + 1 < len(chapters) else None
        assert _nav_target(page, "left-prev") == expected_prev, f"`previous` on {page}"
        assert _nav_target(page, "right-next") == expected_next, f"`next` on {page}"

    if len(chapters) < 2:
        return
    visit = Visit(browser, server, "intro.html")
    try:
        visit.open()
        visit.page.locator("a.right-next").click()
        visit.page.wait_for_url(f"**/{chapters[1]}")
        visit.page.locator("a.left-prev").click()
        visit.page.wait_for_url("**/intro.html")
    finally:
        visit.close()
    assert not visit.outside and not visit.errors, visit.outside + visit.errors


def test_search_finds_course_content(built_site, server, browser, screenshots):
    """The search works offline: a query for "attention" lists pages."""
    visit = Visit(browser, server, "search.html?q=attention")
    try:
        visit.open()
        results = visit.page.locator("#search-results ul.search li")
        results.first.wait_for()
        found = [urlsplit(h).path.lstrip("/") for h in
                 visit.page.eval_on_selector_all("#search-results ul.search li a",
                                                 "els => els.map((a) => a.href)")]
        visit.page.screenshot(path=str(screenshots / "search__attention.png"), full_page=True)
    finally:
        visit.close()
    assert "intro.html" in found, found
    for nb in built_site["notebooks"][:1]:
        assert f"{nb}.html" in found, found
    assert not visit.outside and not visit.errors, visit.outside + visit.errors
