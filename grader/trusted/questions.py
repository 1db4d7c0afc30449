"""Written answers graded question by question: one page per question, the whole class on it.

    python -m grader questions              write grades/questions/index.html and one page per question
    python -m grader questions --serve      the same pages on http://127.0.0.1:<port>/?token=... where the
                                            points are entered (make grade-questions)

Each page has the question's mark scheme and model answer at the top -- read from the SOURCE
notebook's written-answer cell (notebooks/NN/NN.ipynb: the text between ``=== BEGIN MARK SCHEME ===``
and ``=== END MARK SCHEME ===``, as tools/course.py strips it from the release), then every student's
answer with a points field and a comment. Saving the page records the points exactly as ``grader
manual`` does (grades/manual.csv: a hand grade typed here or there is the same entry) and rebuilds
the table, the feedback pages and the read-only copy of these pages once. Points follow the one rule
of ``grader manual`` (store.hand_points: quarter points from 0 to the answer's points; answers left as
released score 0 and take no grade; a row where nothing ran -- no submission, invalid file -- takes
none); a refused save shows the page again with what was typed and why. A row the late rule zeroes
needs no grade (it is shown, not counted as "to grade"). The server listens on 127.0.0.1 only, on a
free port, and answers only requests that carry the random token it prints.
"""

from __future__ import annotations

import html
import re
import secrets
import threading
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

from . import late
from .store import NOT_RUN, POINT_STEP, hand_grade, hand_points, load_manual, load_records, save_manual

MARK_SCHEME = re.compile(r"^=== BEGIN MARK SCHEME ===[ \t]*\n(.*?)^=== END MARK SCHEME ===[ \t]*\n?", re.S | re.M)


def question_texts(assignment) -> dict[str, dict]:
    """grade_id -> {points, model (the model answer), scheme (the mark scheme)} of each written answer."""
    out = {}
    for w in assignment.written:
        source = assignment.cell(w.grade_id).source
        match = MARK_SCHEME.search(source)
        out[w.grade_id] = {"points": w.points, "scheme": match.group(1).strip() if match else "",
                           "model": MARK_SCHEME.sub("", source).strip(), "stub": w.stub}
    return out


def answers(records: list[dict], notebook: str, grade_id: str) -> list[dict]:
    """Every student's answer to one question, from the result records (what the feedback shows)."""
    out = []
    for r in records:
        if r["notebook"] != notebook:
            continue
        w = next((w for w in r["written"] if w["grade_id"] == grade_id), None)
        if w is None:
            continue
        cell = next((c for c in r["cells"] if c.get("kind") == "written" and c.get("grade_id") == grade_id), None)
        out.append({"student": r["student"], "text": cell["source"] if cell else None,
                    "unchanged": w["unchanged"], "not_run": r["auto_status"] in NOT_RUN,
                    "status": r["auto_status"], "max_points": w["max_points"],
                    "submitted_at": r.get("submitted_at"), "zeroed": False})
    return sorted(out, key=lambda a: a["student"])


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;
color:#1d1d1f;line-height:1.45} h1{font-size:1.45em} .scheme{background:#fff8e1;border:1px solid #f0d58a;
padding:.6em 1em;margin:1em 0} .model{background:#f1f8ff;border:1px solid #c8e1ff;padding:.6em 1em}
.answer{border-left:4px solid #d0d7de;margin:1.2em 0;padding:.3em .8em} pre{white-space:pre-wrap;
background:#f6f8fa;border:1px solid #e1e4e8;padding:.6em;font-size:.9em} .meta{font-size:.85em;color:#57606a}
input[type=number]{width:5em} input[type=text]{width:30em} .saved{color:#0a7d22;font-weight:600}
.error{color:#b3261e;font-weight:600}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _to_grade(a: dict, manual: dict, notebook: str, grade_id: str) -> bool:
    return (not a["not_run"] and not a["unchanged"] and a["text"] is not None and not a["zeroed"]
            and (a["student"], notebook, grade_id) not in manual)


def page_path(notebook: str, grade_id: str) -> str:
    """A question's page, relative to the index (the server serves it at "/" + this)."""
    return f"{quote(notebook)}/{quote(grade_id)}.html"


def page(notebook: str, grade_id: str, info: dict, rows: list[dict], manual: dict, *, token: str | None = None,
         message: str = "", typed: dict[str, list[str]] | None = None, error: bool = False) -> str:
    """One question's page: read-only without ``token``; with it, a form that posts back to this page's own
    address (absolute: the page is served at /<notebook>/<question>.html). ``typed``: a refused form's fields."""
    editable = token is not None
    graded = sum(1 for a in rows if (a["student"], notebook, grade_id) in manual)
    todo = sum(1 for a in rows if _to_grade(a, manual, notebook, grade_id))
    index_href = f"/index.html?token={quote(token)}" if editable else "../index.html"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(notebook)} {_e(grade_id)}"
             f"</title><style>{CSS}</style></head><body>",
             f"<p class='meta'><a href='{_e(index_href)}'>all questions</a></p>",
             f"<h1>{_e(notebook)}: <code>{_e(grade_id)}</code> ({info['points']:g} points)</h1>",
             f"<p class='meta'>{len(rows)} students; {graded} graded by hand; {todo} still to grade. Points in steps "
             f"of {POINT_STEP}.</p>"]
    if message:
        parts.append(f"<p class='{'error' if error else 'saved'}' id='message'>{_e(message)}</p>")
    parts.append(f"<div class='scheme'><b>Mark scheme</b><pre>{_e(info['scheme'] or '(none in the source notebook)')}"
                 f"</pre></div><details class='model'><summary><b>Model answer</b></summary><pre>{_e(info['model'])}"
                 "</pre></details>")
    if editable:
        action = f"/{page_path(notebook, grade_id)}?token={quote(token)}"
        parts.append(f"<form method='post' action='{_e(action)}'>")
    else:
        parts.append("<p class='meta'>Read-only copy (rewritten after every save): run <code>make grade-questions"
                     "</code> (or <code>python -m grader questions --serve</code>) to enter points on this page.</p>")
    for a in rows:
        entry = manual.get((a["student"], notebook, grade_id))
        parts.append(f"<div class='answer' id='{_e(a['student'])}'><b>{_e(a['student'])}</b>")
        if a["not_run"]:
            parts.append(f" <span class='meta'>{_e(a['status'])}: nothing to grade</span></div>")
            continue
        if a["text"] is None:
            parts.append(" <span class='meta'>answer cell not found (deleted or its metadata stripped): see the "
                         "feedback page</span>")
        elif a["unchanged"]:
            parts.append(" <span class='meta'>left as released: 0 points, no grade needed</span></div>")
            continue
        else:
            if a["zeroed"]:
                parts.append(" <span class='meta'>the late rule gives this notebook 0: no grade needed</span>")
            parts.append(f"<pre>{_e(a['text'])}</pre>")
        points = entry["points"] if entry else ""
        comment = entry.get("comment", "") if entry else ""
        if typed is not None:
            points = (typed.get(f"points:{a['student']}") or [""])[0]
            comment = (typed.get(f"comment:{a['student']}") or [""])[0]
        if editable:
            parts.append(f"<label>points <input type='number' name='points:{_e(a['student'])}' min='0' "
                         f"max='{a['max_points']:g}' step='{POINT_STEP}' value='{_e(points)}'></label> / "
                         f"{a['max_points']:g} <label>comment <input type='text' name='comment:{_e(a['student'])}' "
                         f"value='{_e(comment)}'></label>")
        else:
            parts.append(f"<p>points: <b>{_e(points) if entry else 'not graded yet'}</b> / {a['max_points']:g}"
                         + (f" &mdash; {_e(comment)}" if comment else "") + "</p>")
        parts.append("</div>")
    if editable:
        parts.append("<p><button type='submit'>Save the points and rebuild the table</button></p></form>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def index(questions: list[tuple[str, str, dict, list[dict]]], manual: dict, token: str | None = None) -> str:
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Written answers</title>"
             f"<style>{CSS}</style></head><body><h1>Written answers, question by question</h1><table>"
             "<tr><th>notebook</th><th>question</th><th>points</th><th>graded</th><th>to grade</th></tr>"]
    for nb, gid, info, rows in questions:
        graded = sum(1 for a in rows if (a["student"], nb, gid) in manual)
        todo = sum(1 for a in rows if _to_grade(a, manual, nb, gid))
        link = page_path(nb, gid) + (f"?token={quote(token)}" if token else "")
        parts.append(f"<tr><td>{_e(nb)}</td><td><a href='{_e(link)}'>{_e(gid)}</a></td><td>{info['points']:g}</td>"
                     f"<td>{graded}</td><td>{todo}</td></tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)


class Questions:
    """The questions of the graded notebooks and what saving a page does."""

    def __init__(self, course, grades: Path, rebuild, policy: late.Policy | None = None):
        from transformer_course_cases import CASES

        from .notebooks import load_assignment

        self.grades, self.rebuild = Path(grades), rebuild
        records = load_records(self.grades)
        self.questions = []
        for nb in sorted({r["notebook"] for r in records}):
            a = load_assignment(course.source_dir, nb, CASES, course.release_dir)
            for gid, info in question_texts(a).items():
                rows = answers(records, nb, gid)
                for row in rows:                     # the late rule's 0 stands whatever the answer earns
                    row["zeroed"] = late.assess(policy or late.Policy(), row["student"], nb, row["submitted_at"],
                                                0.0, not_run=row["not_run"])["zeroed"]
                self.questions.append((nb, gid, info, rows))

    def find(self, nb: str, gid: str):
        return next((q for q in self.questions if q[0] == nb and q[1] == gid), None)

    def write_static(self) -> Path:
        """The read-only copy (grades/questions/): written at start and after every save."""
        out = self.grades / "questions"
        manual = load_manual(self.grades)
        for nb, gid, info, rows in self.questions:
            path = out / nb / f"{gid}.html"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(page(nb, gid, info, rows, manual), encoding="utf-8", errors="replace")
        out.mkdir(parents=True, exist_ok=True)
        (out / "index.html").write_text(index(self.questions, manual), encoding="utf-8")
        return out / "index.html"

    def save(self, nb: str, gid: str, form: dict[str, list[str]]) -> str:
        """Record the points typed on one question's page by `grader manual`'s rule (store.hand_points; all
        or nothing: one refused field saves none); rebuild the table and the read-only copy once."""
        question = self.find(nb, gid)
        if question is None:
            raise ValueError(f"no written question {nb} {gid}")
        _, _, info, rows = question
        by_student = {a["student"]: a for a in rows}
        entries = load_manual(self.grades)
        changed = 0
        for key, values in form.items():
            if not key.startswith("points:"):
                continue
            student, raw = key[len("points:"):], (values[0] if values else "").strip()
            a = by_student.get(student)
            if a is None:
                raise ValueError(f"{student}: not in the class's answers to {nb} {gid}")
            comment = (form.get(f"comment:{student}") or [""])[0].strip()
            old = entries.get((student, nb, gid))
            if raw == "":
                if old is not None:
                    del entries[(student, nb, gid)]
                    changed += 1
                continue
            points = hand_points(raw, float(a["max_points"]), student, {"unchanged": a["unchanged"]}, a["status"])
            if old is not None and float(old["points"]) == points and old.get("comment", "") == comment:
                continue
            entries[(student, nb, gid)] = hand_grade(student, nb, gid, points, comment)
            changed += 1
        if changed:
            save_manual(self.grades, entries)
            self.rebuild()
            self.write_static()
        return f"saved: {changed} hand grade{'s' if changed != 1 else ''} changed; the table is rebuilt"


def serve(questions: Questions, port: int = 0, announce=print, token: str | None = None):
    """An HTTP server on 127.0.0.1 for the question pages (returns it; call serve_forever)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    token = token or secrets.token_urlsafe(16)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _authorised(self, query) -> bool:
            if secrets.compare_digest((query.get("token") or [""])[0], token):
                return True
            self._send(403, "<p>Forbidden: open the address printed by <code>grader questions --serve</code>.</p>")
            return False

        def _send(self, code: int, body: str) -> None:
            data = body.encode("utf-8", errors="replace")
            self.send_response(code)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _route(self, path: str):
            parts = [unquote(p) for p in path.split("/") if p]
            if not parts or parts == ["index.html"]:
                return "index", None
            if len(parts) == 2 and parts[1].endswith(".html"):
                return parts[0], parts[1][:-5]
            return None, None

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if not self._authorised(query):
                return
            nb, gid = self._route(url.path)
            manual = load_manual(questions.grades)
            if nb == "index":
                return self._send(200, index(questions.questions, manual, token))
            q = questions.find(nb, gid) if nb else None
            if q is None:
                return self._send(404, "<p>No such question.</p>")
            self._send(200, page(nb, gid, q[2], q[3], manual, token=token, message=(query.get("msg") or [""])[0]))

        def do_POST(self):  # noqa: N802
            url = urlparse(self.path)
            if not self._authorised(parse_qs(url.query)):
                return
            nb, gid = self._route(url.path)
            q = questions.find(nb, gid) if nb and nb != "index" else None
            if q is None:
                return self._send(404, "<p>No such question.</p>")
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return self._send(400, "<p>Bad request.</p>")
            if not 0 <= length <= 5 << 20:
                return self._send(413, "<p>Too large.</p>")
            form = parse_qs(self.rfile.read(length).decode("utf-8", errors="replace"), keep_blank_values=True)
            try:
                with lock:                           # one save at a time: manual.csv and the table
                    message = questions.save(nb, gid, form)
            except ValueError as exc:                # the page again, with what was typed and why it was refused
                return self._send(400, page(nb, gid, q[2], q[3], load_manual(questions.grades), token=token,
                                            message=f"Not saved: {exc}", typed=form, error=True))
            self.send_response(303)
            self.send_header("Location", f"/{page_path(nb, gid)}?token={quote(token)}&msg={quote(message)}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.token = token
    server.url = f"http://127.0.0.1:{server.server_address[1]}/index.html?token={token}"
    announce(f"written answers, question by question: {server.url}   (Ctrl-C to stop)")
    return server
