"""What a student wrote, made inert before an instructor's browser shows it (hub/README.md, issue 37).

A submitted notebook reaches the instructor's browser in Formgrader (its markdown rendered to
HTML by nbconvert, no sanitiser), in JupyterLab, in feedback pages. Anything in it that a
browser could run -- an ``onerror`` attribute, an ``<svg onload>``, a ``javascript:`` link, an
``<iframe srcdoc>``, a MathML mutation, an HTML or JavaScript output -- would run as the
instructor, with their server's API. This module decides, with an allowlist, what may be shown
as HTML, and turns the rest into text:

* a markdown cell is rendered exactly as Formgrader renders it (nbconvert's mistune renderer)
  and the HTML is parsed with html5lib, the HTML5 parsing algorithm browsers use (bleach's
  copy; bleach 6.4.0 is in requirements/lock.txt). If every element, attribute and URL is on
  the allowlist below, the cell stays as the student wrote it; otherwise its source is shown
  verbatim in a fenced code block under a one-line note: the instructor reads exactly what the
  student wrote, and nothing of it is markup;
* outputs keep plain text, streams, errors and raster images (PNG, JPEG, GIF); HTML and
  markdown outputs only when they pass the same check; SVG, JavaScript, LaTeX, widget views
  and every other type are dropped (a text note says which);
* attachments keep raster images only; raw cells lose their MIME type (shown as text);
  nbgrader metadata whose grade id is not a plain identifier is removed; widget state is removed.

Used where the content enters: the hub's exchange collect (hub/tc_hub/exchange.py: every
collected notebook), the course grader's push into Formgrader (grader/trusted/formgrader.py:
the notebooks Formgrader shows); and where it is shown: Formgrader's markdown filter on the
hub (hub/tc_hub/formgrader.py). Only bleach and nbconvert (both in the lock) and the standard
library: the hub installs a copy of this file into its venv (hubctl.install_roles).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from html.parser import HTMLParser

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "input", "ins", "kbd", "li", "ol", "p",
    "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td",
    "tfoot", "th", "thead", "tr", "u", "ul", "var",
}
# attributes per tag ("*": every allowed tag); every value is checked again below
ALLOWED_ATTRIBUTES = {
    "*": {"class", "title"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "h1": {"id"}, "h2": {"id"}, "h3": {"id"}, "h4": {"id"}, "h5": {"id"}, "h6": {"id"},
    "ol": {"start"},
    "details": {"open"},
    "th": {"style", "align", "colspan", "rowspan"}, "td": {"style", "align", "colspan", "rowspan"},
    "input": {"type", "disabled", "checked"},
}
# class names nbconvert's renderer writes: pygments' token classes, anchors, task lists, code languages
CLASS_NAME = re.compile(r"^(highlight|hll|anchor-link|task-list-item|task-list-item-checkbox|language-[A-Za-z0-9_+-]{1,40}"
                        r"|[a-z]{1,3}[0-9]?)$")
ID_VALUE = re.compile(r"^.{1,300}$", re.S)                # a heading's anchor (nbconvert: from its text); an id runs nothing
NUMBER = re.compile(r"^[0-9]{1,4}(%|px)?$")
TABLE_ALIGN = re.compile(r"^text-align:\s*(left|right|center);?$")
LINK_SCHEMES = {"http", "https", "mailto"}
RASTER = ("image/png", "image/jpeg", "image/gif")
DATA_IMAGE = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
PLAIN_RELATIVE = re.compile(r"^(?!/)(?!.*\.\.)[A-Za-z0-9_./#-]*$")   # an image beside the notebook
# MathJax builds links and styles from TeX: \href{javascript:...}, \style{background:url(...)} (Formgrader
# and JupyterLab typeset the maths of markdown cells after any HTML sanitiser has run)
TEX_ACTIVE = re.compile(r"\\(href|url)\s*\{\s*(?!https?:|mailto:)|\\(style|class|cssId|data|attr|unicode|require)\b")
SAFE_GRADE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
OUTPUT_KEEP = {"text/plain", "application/json", *RASTER}
NOTE = ("*Shown as text: this cell held markup a browser could run (HTML, a link, a script), or markup that "
        "could not be rendered safely.*")


def _url_problem(value: str, image: bool) -> str | None:
    """Why this URL may not be shown (None: it may)."""
    # browsers drop tabs and newlines anywhere in a URL and ignore leading spaces and controls
    url = re.sub(r"^[\x00-\x20]+", "", re.sub(r"[\t\n\r]", "", value))
    if image:
        if DATA_IMAGE.match(url) or PLAIN_RELATIVE.match(url):
            return None
        return f"image source {value[:60]!r}"
    scheme = SCHEME.match(url)                  # no scheme: a relative link (an anchor, ../theory.md)
    if scheme and scheme.group(1).lower() not in LINK_SCHEMES:
        return f"link {value[:60]!r}"
    return None


def _attribute_problems(tag: str, attributes) -> list[str]:
    found = []
    allowed = ALLOWED_ATTRIBUTES["*"] | ALLOWED_ATTRIBUTES.get(tag, set())
    for name, value in attributes:
        name, value = str(name), "" if value is None else str(value)
        if name not in allowed:
            found.append(f"<{tag} {name}=...>")
        elif name == "class" and not all(CLASS_NAME.match(c) for c in value.split()):
            found.append(f"<{tag} class={value[:40]!r}>")
        elif name == "id" and not ID_VALUE.match(value):
            found.append(f"<{tag} id={value[:40]!r}>")
        elif name in ("width", "height", "start", "colspan", "rowspan") and not NUMBER.match(value):
            found.append(f"<{tag} {name}={value[:40]!r}>")
        elif name == "style" and not TABLE_ALIGN.match(value.strip()):
            found.append(f"<{tag} style=...>")
        elif name == "align" and value not in ("left", "right", "center"):
            found.append(f"<{tag} align=...>")
        elif name == "type" and value != "checkbox":
            found.append(f"<{tag} type={value[:20]!r}>")
        elif name in ("href", "src"):
            problem = _url_problem(value, image=(tag == "img"))
            if problem:
                found.append(problem)
    return found


class _Tokens(HTMLParser):
    """Every start tag, comment and declaration as a plain tokenizer sees it (stdlib html.parser)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.found.append(f"<{tag}>")
        else:
            self.found += _attribute_problems(tag, attrs)

    handle_startendtag = handle_starttag

    def handle_comment(self, data):
        self.found.append("an HTML comment")

    def handle_decl(self, decl):
        self.found.append(f"<!{decl[:20]}>")

    def handle_pi(self, data):
        self.found.append(f"<?{data[:20]}>")

    def unknown_decl(self, data):
        self.found.append(f"<![{data[:20]}>")


def html_problems(html: str) -> list[str]:
    """What in this HTML fragment is not on the allowlist ([] when all of it is).

    Two independent readings, and the union of what they find: the tree a browser builds
    (html5lib, the HTML5 tree-construction algorithm: foreign MathML/SVG content, misnested
    tags, the mutations sanitiser bypasses rely on), and every start tag a plain tokenizer sees
    (stdlib html.parser: also tags the tree builder drops or merges, such as <body onload>,
    whose attributes a browser adds to the page's own body).
    """
    from bleach._vendor import html5lib

    tree = html5lib.parseFragment(html, treebuilder="etree", namespaceHTMLElements=False)
    found = []
    for element in tree.iter():
        tag = element.tag
        if tag == "DOCUMENT_FRAGMENT":
            continue
        if not isinstance(tag, str):                      # comments, processing instructions
            found.append("an HTML comment")
        elif tag not in ALLOWED_TAGS:                     # also svg/math elements: "{namespace}tag"
            found.append(f"<{tag.rsplit('}', 1)[-1]}>")
        else:
            found += _attribute_problems(tag, element.attrib.items())
    tokens = _Tokens()
    tokens.feed(html)
    tokens.close()
    return found + [f for f in tokens.found if f not in found]


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """Markdown -> HTML as Formgrader and nbconvert's HTML export render it (mistune, escape=False)."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    return MarkdownWithMath(renderer=IPythonRenderer(escape=False, attachments=attachments or {})).render(source)


def markdown_problems(source: str, attachments: dict | None = None) -> list[str]:
    """What in this markdown, rendered as Formgrader renders it, is not on the allowlist ([]: none)."""
    key = json.dumps(attachments, sort_keys=True) if attachments else ""
    return list(_markdown_problems(source, key))


@functools.lru_cache(maxsize=4096)     # a class's notebooks share the instructor's cells: each is checked once
def _markdown_problems(source: str, attachments_json: str) -> tuple[str, ...]:
    try:
        html = render_markdown(source, json.loads(attachments_json) if attachments_json else None)
    except Exception as exc:                              # a missing attachment, a renderer error
        return (f"markdown the renderer refused ({type(exc).__name__})",)
    found = html_problems(html)
    typeset = re.sub(r"<(pre|code)\b.*?</\1>", "", html, flags=re.S)   # MathJax skips code (skipHtmlTags)
    tex = TEX_ACTIVE.search(typeset)
    if tex:
        found.append(f"TeX command {tex.group(0)[:20]!r} (MathJax makes links and styles)")
    return tuple(found)


def verbatim(source: str) -> str:
    """The source as a fenced code block (longer fence than any backtick run in it) under the note."""
    longest = max((len(m) for m in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{NOTE}\n\n{fence}text\n{source}\n{fence}\n"


def safe_markdown_html(source: str, attachments: dict | None = None) -> str:
    """The HTML to show for a markdown cell: its rendering if on the allowlist, else the source as text."""
    if not markdown_problems(source, attachments):
        return render_markdown(source, attachments)
    return render_markdown(verbatim(source))


def _join(text) -> str:
    return "".join(text) if isinstance(text, list) else str(text)


def _inert_outputs(outputs: list, where: str, changes: list[str]) -> list:
    kept = []
    for out in outputs:
        kind = out.get("output_type")
        if kind in ("stream", "error"):
            kept.append(out)
            continue
        if kind not in ("display_data", "execute_result", "update_display_data"):
            changes.append(f"{where}: output of type {kind!r} removed")
            continue
        data, dropped = {}, []
        for mime, value in (out.get("data") or {}).items():
            if mime in OUTPUT_KEEP:
                if mime in RASTER and not (isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9+/=\s]*", value)):
                    dropped.append(mime)
                    continue
                data[mime] = value
            elif mime == "text/html" and not html_problems(_join(value)):
                data[mime] = value
            elif mime == "text/markdown" and not markdown_problems(_join(value)):
                data[mime] = value
            else:
                dropped.append(mime)
        if dropped:
            changes.append(f"{where}: output {', '.join(dropped)} removed")
            if "text/plain" not in data:
                data["text/plain"] = f"[output removed before grading: {', '.join(dropped)}]"
        meta = out.get("metadata") or {}
        out["metadata"] = {m: v for m, v in meta.items() if m in data and isinstance(v, dict)
                           and set(v) <= {"width", "height"}}
        out["data"] = data                                # (the notebook is a deep copy already)
        kept.append(out)
    return kept


def inert_notebook(nb) -> tuple[object, list[str]]:
    """A copy of the notebook (nbformat node or dict) with nothing a browser could run; and what changed."""
    nb = copy.deepcopy(nb)
    changes: list[str] = []
    meta = nb.get("metadata", {})
    if "widgets" in meta:
        del meta["widgets"]
        changes.append("notebook: widget state removed")
    for i, cell in enumerate(nb.get("cells", [])):
        where = f"cell {i}"
        kind = cell.get("cell_type")
        cmeta = cell.get("metadata", {})
        grader = cmeta.get("nbgrader")
        if isinstance(grader, dict) and not SAFE_GRADE_ID.match(str(grader.get("grade_id", "x"))):
            del cmeta["nbgrader"]
            changes.append(f"{where}: nbgrader metadata with grade id {str(grader.get('grade_id'))[:40]!r} removed")
        attachments = cell.get("attachments")
        if attachments:
            for name in list(attachments):
                bundle = attachments[name] if isinstance(attachments[name], dict) else {}
                raster = {m: v for m, v in bundle.items() if m in RASTER and isinstance(v, str)}
                if raster != bundle:
                    changes.append(f"{where}: attachment {name[:40]!r}: {sorted(set(bundle) - set(raster))} removed")
                    if raster:
                        attachments[name] = raster
                    else:
                        del attachments[name]
        if kind == "markdown":
            source = _join(cell.get("source", ""))
            problems = markdown_problems(source, cell.get("attachments"))
            if problems:
                cell["source"] = verbatim(source)
                cell.pop("attachments", None)
                changes.append(f"{where}: markdown shown as text ({'; '.join(sorted(set(problems))[:5])})")
        elif kind == "raw":
            for key in ("raw_mimetype", "format"):
                if key in cmeta:
                    del cmeta[key]
                    changes.append(f"{where}: raw cell's {key} removed")
        elif kind == "code":
            cell["outputs"] = _inert_outputs(cell.get("outputs", []), where, changes)
    return nb, changes


def inert_file(path) -> list[str]:
    """Make the notebook at ``path`` inert in place; what changed ([] and untouched when nothing did).

    A file that is not a readable notebook is left as it is (the grader reports it as such).
    """
    from pathlib import Path

    path = Path(path)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return []
    new, changes = inert_notebook(nb)
    if changes:
        tmp = path.with_name(path.name + ".inert-tmp")
        tmp.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    return changes
