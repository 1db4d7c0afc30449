"""The course website, served on 127.0.0.1 and read by a real headless browser.

The site is built by ``make site`` (Jupyter Book from site/_config.yml and site/_toc.yml, with
``--warningiserror``: a dead link or a missing page fails the build); the session fixture below
runs it, which rebuilds only what changed. Every page is then opened in Debian's Chromium,
driven by Playwright, and checked as a reader would see it:

* no console error and no uncaught exception;
* every image loaded (``naturalWidth > 0``);
* maths typeset at build time (site/prerender_math.cjs): every ``.math`` element holds a MathJax
  container, the page carries MathJax's CommonHTML stylesheet and loads no MathJax script (the
  reader's browser typesets nothing), no MathJax error node exists and no font failed to load;
* every internal link resolves, to a file of the site and, for ``#...``, to
  an element with that id;
* no request leaves 127.0.0.1: every other request is blocked and recorded;
* nothing the page asked for failed (no 4xx/5xx, no failed request);
* titles are plain text (no raw TeX), search snippets show the text around the hit,
  solutions pages carry no student instructions, the footer states the licence and links
  to the About page, and a six-panel figure stays readable at a phone's width (390 px).

A full-page screenshot of each page is saved to .artifacts/site-screenshots/.

Without Chromium (``make browser-deps``: ``apt-get install chromium``) or the
Python package playwright the browser tests skip, saying so. Never run
``playwright install``: it downloads a browser build, which is not possible here;
the tests use /usr/bin/chromium through executable_path (CHROMIUM overrides it).
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
HTML = REPO / "site" / "_build" / "html"
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
# Every wait is for a condition (the load event, images decoded, fonts ready), never for the network
# to fall quiet ("networkidle" once waited 300 s and more here), within a budget. The heaviest page,
# theory.html (969 formulas, typeset at build time), in this Chromium on 2 cores: ready in 1.4-2.5 s
# at load 8-10, 3.4-4.7 s at load ~15; its whole test here, full-page screenshot included, 5-15 s.
# 120 s holds at load 4 with a wide margin.
PAGE_TIMEOUT_MS = 120_000
INSTALL_BROWSER = (
    "install it with `make browser-deps` (runs `apt-get install -y chromium`); "
    "never `playwright install`, which downloads a browser and fails offline"
)


NOTEBOOKS = sorted(p.relative_to(REPO).with_suffix("").as_posix()
                   for p in REPO.glob("solutions/*/*.ipynb") if ".ipynb_checkpoints" not in p.parts)
CHAPTERS = ["intro"] + NOTEBOOKS + ["solutions/theory", "solutions/GUIDE", "about"]   # the order of site/_toc.yml
PAGES = ["index.html"] + [f"{c}.html" for c in CHAPTERS] + ["search.html", "genindex.html"]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def built_site() -> Path:
    """The built site: `make site` (it rebuilds only when an input changed)."""
    if importlib.util.find_spec("jupyter_book") is None:
        pytest.skip("jupyter-book is not installed: run `make env`")
    subprocess.run(["make", "--no-print-directory", "site"], cwd=REPO, check=True)
    return HTML


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
        pytest.skip("the Python package playwright is not installed: run `make env`")
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
        # a long page (theory, hundreds of formulas) on a busy 2-core machine takes a while to
        # lay out and to screenshot: PAGE_TIMEOUT_MS
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
        # The maths are typeset already (no MathJax runs in the page); wait for every image to be
        # decoded and every font in use (MathJax's among them) to be loaded.
        self.page.evaluate(
            """async () => {
                await Promise.all([...document.images].map((img) => {
                    img.loading = 'eager';
                    return img.decode().catch(() => null);
                }));
                if (document.fonts) { await document.fonts.ready; }
            }"""
        )

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
def test_build_is_complete_and_make_knows_it_is_current(built_site):
    missing = [p for p in PAGES if not (HTML / p).is_file()]
    assert not missing, f"pages missing from the built site: {missing}"
    # `make serve` depends on `site`: with nothing changed, make must not rebuild anything.
    question = subprocess.run(["make", "--no-print-directory", "-q", "site"], cwd=REPO)
    assert question.returncode == 0, "make site would rebuild an up-to-date site"


def _html_files() -> list[str]:
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html") if "_static" not in p.parts)


def test_no_page_references_another_host(built_site):
    """Static check (no browser needed): no script, style, image or frame URL
    on another host, so no page can ask anything of one."""
    offenders = []
    attr = re.compile(
        r"<(script|link|img|iframe|source|video|audio|embed|object)\b[^>]*?"
        r"\b(?:src|href|data)=[\"']((?:https?:)?//[^\"']+)",
        re.I,
    )
    for page in _html_files():
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
                    runtime: [...document.scripts].map((el) => el.src).filter((src) => /mathjax/i.test(src))
                        .concat(window.MathJax ? ['window.MathJax'] : []),
                    stylesheet: !!document.getElementById('MJX-CHTML-styles'),
                    fonts: [...document.fonts].filter((f) => f.status === 'error').map((f) => f.family),
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
        # course.css lets the browser skip sections far from the screen (content-visibility: auto);
        # a reader's scrolling brings them in, a full-page screenshot does not: render them all.
        page.add_style_tag(content="* { content-visibility: visible !important; }")
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
        if not maths["stylesheet"]:
            problems.append("maths on the page but no MathJax CommonHTML stylesheet: not typeset at build time")
        if maths["rendered"] != maths["total"]:
            problems.append(
                f"{maths['total'] - maths['rendered']} of {maths['total']} maths not rendered: "
                f"{maths['raw'][:5]}"
            )
    problems += [f"MathJax error: {e}" for e in maths["errors"]]
    problems += [f"MathJax runs in the page (the maths should come typeset): {src}" for src in maths["runtime"]]
    problems += [f"font failed to load: {family}" for family in maths["fonts"]]

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

    text = (HTML / page).read_text()
    start = text.find('<div class="prev-next-area">')       # parse only the page's navigation:
    soup = BeautifulSoup(text[start:] if start >= 0 else text, "html.parser")   # pages are large
    link = soup.select_one(f"a.{css_class}")
    if link is None:
        return None
    target = (HTML / page).parent / link["href"].split("#")[0]
    return target.resolve().relative_to(HTML).as_posix()


def test_previous_next_navigation(built_site, server, browser):
    """Every page of the table of contents links to the one before and after
    it in course order, and following the links in the browser works."""
    chapters = [f"{c}.html" for c in CHAPTERS]
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
        for link, target in (("a.right-next", chapters[1]), ("a.left-prev", chapters[0])):
            # Follow the link the way a reader does, once the page has stopped moving: a click
            # while images and fonts still change the layout can land beside the link (CI saw
            # the second click do nothing for 120 s on a loaded machine).
            anchor = visit.page.locator(link)
            anchor.scroll_into_view_if_needed()
            with visit.page.expect_navigation(wait_until="load"):
                anchor.click()
            assert visit.page.url.endswith("/" + target), f"{link} led to {visit.page.url}, not {target}"
            visit.settle()
    finally:
        visit.close()
    assert not visit.outside and not visit.errors, visit.outside + visit.errors


def test_search_finds_course_content(built_site, server, browser, screenshots):
    """The search works offline: a query for "attention" lists pages."""
    visit = Visit(browser, server, "search.html?q=attention")
    try:
        visit.open()
        # Sphinx lists the hits one by one (5 ms apart, slower under load) and only then says
        # "Search finished": read the list after that, not after the first hit.
        visit.page.wait_for_function(
            "() => { const s = document.querySelector('#search-results p.search-summary');"
            " return s !== null && s.innerText.startsWith('Search finished'); }")
        found = [urlsplit(h).path.lstrip("/") for h in
                 visit.page.eval_on_selector_all("#search-results ul.search li a",
                                                 "els => els.map((a) => a.href)")]
        visit.page.screenshot(path=str(screenshots / "search__attention.png"), full_page=True)
    finally:
        visit.close()
    assert "intro.html" in found, found
    for nb in NOTEBOOKS[:1]:
        assert f"{nb}.html" in found, found
    assert not visit.outside and not visit.errors, visit.outside + visit.errors


# --------------------------------------------------------------------------- what a reader sees
def test_titles_are_plain_text(built_site):
    """A title with maths (notebook 02's sqrt(d_k)) reads as text in the tab, the navigation and
    the search index, none of which typesets TeX."""
    raw_tex = re.compile(r"\\\(|\\\[|\$|\\[a-zA-Z]+\{")
    titled = [p for p in _html_files() if p != "index.html"]            # index.html only redirects
    for page in titled:
        title = re.search(r"<title>(.*?)</title>", (HTML / page).read_text(), re.S).group(1)
        assert not raw_tex.search(title), f"{page}: raw TeX in <title>: {title}"
    titles = re.search(r'"titles":\s*(\[[^\]]*\])', (HTML / "searchindex.js").read_text()).group(1)
    assert not raw_tex.search(titles), f"raw TeX in the search index's titles: {titles}"
    page_02 = next(p for p in NOTEBOOKS if p.startswith("solutions/02_"))
    assert "√d_k" in (HTML / f"{page_02}.html").read_text()


def test_solutions_pages_carry_no_student_instructions(built_site):
    for nb in NOTEBOOKS:
        text = (HTML / f"{nb}.html").read_text()
        for phrase in ("are yours", "graded by hand"):
            assert phrase not in text, f"{nb}.html still says {phrase!r}"
    # only those sentences went: the rest of their paragraph (the link to theory.md) stays
    assert "Derivations live in" in (HTML / f"{NOTEBOOKS[0]}.html").read_text()


def test_footer_states_the_licence_and_links_to_about(built_site):
    for page in ["intro.html", f"{NOTEBOOKS[-1]}.html", "about.html"]:
        footer = re.search(r'<div class="extra_footer">(.*?)</div>', (HTML / page).read_text(), re.S)
        assert footer and "MIT licence" in footer.group(1) and 'href="/about.html"' in footer.group(1), page
    assert "## Layout" not in (HTML / "about.html").read_text() and "lib/transformer_course" in (
        HTML / "about.html").read_text()


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_search_snippets_show_the_text_around_the_hit(built_site, server, browser):
    """Each snippet is cut from the page's own text (not from its table of contents) and holds the
    word searched for."""
    visit = Visit(browser, server, "search.html?q=saturate")
    try:
        visit.open()
        # Sphinx lists the results one by one, then says "Search finished"; each snippet arrives later, when its
        # page has been fetched: wait for the end of the list and for the first four snippets, not the first one only.
        visit.page.wait_for_function(
            "() => { const done = /finished/.test((document.querySelector('#search-results p.search-summary') || {})"
            ".textContent || ''); const items = [...document.querySelectorAll('#search-results ul.search li')];"
            " return done && items.length > 0 && items.slice(0, 4).every((li) => li.querySelector('p.context')); }")
        results = visit.page.eval_on_selector_all(
            "#search-results ul.search li",
            "els => els.map((li) => ({href: li.querySelector('a').href, title: li.querySelector('a').textContent,"
            " snippet: (li.querySelector('p.context') || {}).textContent || ''}))")
    finally:
        visit.close()
    from bs4 import BeautifulSoup

    article_text = {}                     # the page's text as the search reads it: the HTML, untypeset
    for result in results[:4]:
        path = urlsplit(result["href"]).path
        article = BeautifulSoup((HTML / path.lstrip("/")).read_text(), "html.parser").select_one("article")
        for element in article.select(".headerlink, script, style"):
            element.decompose()
        article_text[path] = article.get_text()
    assert results, "no search results for 'saturate'"
    for result in results[:4]:
        snippet = _normalised(result["snippet"]).removeprefix("...").removesuffix("...").strip()
        assert "saturat" in snippet.lower(), result
        assert snippet in _normalised(article_text[urlsplit(result["href"]).path]), (
            f"snippet not from the page's text: {result}")
        assert "\\(" not in result["title"], result
    assert not visit.outside and not visit.errors, visit.outside + visit.errors


def test_six_panel_figure_is_readable_at_phone_width(built_site, server, browser, screenshots):
    """At 390 px a wide figure keeps its own size in a box that scrolls sideways; the page itself
    does not scroll sideways."""
    page_02 = next(p for p in NOTEBOOKS if p.startswith("solutions/02_"))
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
    try:
        page = context.new_page()
        page.goto(server["base"] + f"{page_02}.html", wait_until="load")
        widest = page.evaluate(
            """() => { const imgs = [...document.querySelectorAll('.cell_output img')];
                       imgs.sort((a, b) => b.naturalWidth - a.naturalWidth);
                       const img = imgs[0]; img.scrollIntoView();
                       const box = img.closest('.cell_output');
                       return {natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
                               boxScroll: box.scrollWidth, boxWidth: box.clientWidth,
                               pageScroll: document.documentElement.scrollWidth}; }""")
        page.screenshot(path=str(screenshots / "phone__02_widest_figure.png"))
    finally:
        context.close()
    assert widest["natural"] > 800, widest                        # the 2 x 3 heatmaps
    assert widest["shown"] >= 0.99 * min(widest["natural"], 1100), widest
    assert widest["boxScroll"] > widest["boxWidth"], widest       # it scrolls in its box
    assert widest["pageScroll"] <= 390, widest                    # the page does not
