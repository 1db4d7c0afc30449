"""Write the course's maps from its manifest, course.toml (``make maps``).

The manifest lists each notebook (folder, title, what you build, what you see, the website's
paragraph) and each concept of the package (name, module, main names, notebooks). From it this
script writes, between BEGIN GENERATED / END GENERATED markers so the prose around them stays:

    README.md       the course table (## The course) and the layout block (## Layout)
    lib/README.md   the module map
    site/intro.md   the opening paragraph and the notebook-by-notebook list
    CITATION.cff    the abstract

    python tools/maps.py           rewrite what is stale (prints each file it writes)
    python tools/maps.py --check   print what is stale and exit 1; change nothing

Standard library only (Python 3.11: tomllib). Before writing anything it checks the manifest
against the repository: every notebooks/NN_name/NN_name.ipynb has an entry and every entry a
notebook, each `build` line names exactly the notebook's exercises (the functions its solution
cells define), and each concept's module exists. tests/test_course_maps.py runs these checks,
the staleness check, and imports each listed name from the package.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "course.toml"
PACKAGE = "lib/transformer_course"
COMMAND = "make maps"
NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                "fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()


class MapsError(ValueError):
    """The manifest, or a file the maps are written into, is not as this script needs it."""


# ------------------------------------------------------------------------------ the manifest
@dataclass(frozen=True)
class Notebook:
    folder: str                      # "01_attention"
    title: str
    build: str
    see: str
    site: str
    model: dict | None = None        # {"name": ..., "what": ...}

    @property
    def number(self) -> str:
        return self.folder[:2]

    @property
    def solutions_path(self) -> str:
        return f"solutions/{self.folder}/{self.folder}.ipynb"

    @property
    def source_path(self) -> str:
        return f"notebooks/{self.folder}/{self.folder}.ipynb"


@dataclass(frozen=True)
class Concept:
    name: str
    module: str                      # dotted, under transformer_course: "softmax", "models.llama"
    names: tuple[str, ...]
    notebooks: tuple[str, ...]       # ("01", "02"); () for a helper of the package


@dataclass(frozen=True)
class Folder:
    path: str
    text: str


@dataclass(frozen=True)
class Course:
    intro: str
    theory: str
    abstract: str
    notebooks: tuple[Notebook, ...]
    concepts: tuple[Concept, ...]
    folders: tuple[Folder, ...]


FIELDS = {  # table -> (required keys, optional keys)
    "course": ({"intro", "theory", "abstract"}, set()),
    "notebook": ({"folder", "title", "build", "see", "site"}, {"model"}),
    "concept": ({"name", "module", "names", "notebooks"}, set()),
    "folder": ({"path", "text"}, set()),
}


def _checked(table: str, index: int | None, entry: object) -> dict:
    where = f"[{table}]" if index is None else f"[[{table}]] #{index + 1}"
    if not isinstance(entry, dict):
        raise MapsError(f"{MANIFEST}: {where} must be a table, got {type(entry).__name__}")
    label = entry.get("folder") or entry.get("name") or entry.get("path")
    where += f" ({label})" if label else ""
    required, optional = FIELDS[table]
    missing, unknown = required - entry.keys(), entry.keys() - required - optional
    if missing:
        raise MapsError(f"{MANIFEST}: {where} lacks {', '.join(sorted(missing))}")
    if unknown:
        raise MapsError(f"{MANIFEST}: {where} has unknown key(s) {', '.join(sorted(unknown))}; "
                        f"expected {', '.join(sorted(required | optional))}")
    for key, value in entry.items():
        expected = list if key in ("names", "notebooks") else dict if key == "model" else str
        if not isinstance(value, expected) or (expected is list and not all(isinstance(v, str) for v in value)):
            kind = {list: "list of strings", dict: "table", str: "string"}[expected]
            raise MapsError(f"{MANIFEST}: {where}: {key} must be a {kind}, got {value!r}")
    if "model" in entry and set(entry["model"]) != {"name", "what"}:
        raise MapsError(f"{MANIFEST}: {where}: model must be {{ name = ..., what = ... }}, got {entry['model']!r}")
    return entry


def load(root: Path = ROOT) -> Course:
    """Read and check course.toml's structure (not yet against the repository: see `problems`)."""
    try:
        with open(root / MANIFEST, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        raise MapsError(f"{MANIFEST}: not valid TOML: {error}") from None
    unknown = data.keys() - FIELDS.keys()
    if unknown:
        raise MapsError(f"{MANIFEST}: unknown table(s) {', '.join(sorted(unknown))}; expected "
                        "[course], [[notebook]], [[concept]], [[folder]]")
    course = _checked("course", None, data.get("course", {}))
    lists = {}
    for table in ("notebook", "concept", "folder"):
        entries = data.get(table)
        if not isinstance(entries, list) or not entries:
            raise MapsError(f"{MANIFEST}: needs at least one [[{table}]] entry")
        lists[table] = [_checked(table, i, e) for i, e in enumerate(entries)]
    return Course(
        intro=course["intro"].strip(), theory=course["theory"].strip(), abstract=course["abstract"].strip(),
        notebooks=tuple(Notebook(**{k: (v.strip() if isinstance(v, str) else v) for k, v in e.items()})
                        for e in lists["notebook"]),
        concepts=tuple(Concept(e["name"].strip(), e["module"].strip(), tuple(e["names"]), tuple(e["notebooks"]))
                       for e in lists["concept"]),
        folders=tuple(Folder(e["path"].strip(), e["text"].strip()) for e in lists["folder"]),
    )


# ----------------------------------------------------------------- the manifest against the repo
def source_notebooks(root: Path = ROOT) -> list[str]:
    """The folders of notebooks/ that hold a source notebook NN_name/NN_name.ipynb."""
    return sorted(p.parent.name for p in (root / "notebooks").glob("*/*.ipynb")
                  if p.stem == p.parent.name and ".ipynb_checkpoints" not in p.parts)


def exercise_definitions(notebook: Path) -> list[ast.FunctionDef | ast.ClassDef]:
    """The public functions and classes the notebook's solution cells define (their `ast` nodes), in order."""
    nodes = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        source = "".join(cell["source"])
        try:
            body = ast.parse(source).body
        except SyntaxError as error:
            raise MapsError(f"{notebook}: a solution cell does not parse ({error})") from None
        nodes += [node for node in body
                  if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")]
    return nodes


def exercises(notebook: Path) -> list[str]:
    """The public functions and classes the notebook's solution cells define, in order."""
    return [node.name for node in exercise_definitions(notebook)]


def build_names(notebook: Notebook) -> list[str]:
    """The identifiers a `build` line names in backticks (`torch.nn.X` and the like are not)."""
    return re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", notebook.build)


def module_file(module: str, root: Path = ROOT) -> str | None:
    """`module`'s place in the package, as the maps show it ("softmax.py", "grading/"), or None."""
    relative = module.replace(".", "/")
    if (root / PACKAGE / f"{relative}.py").is_file():
        return f"{relative}.py"
    if (root / PACKAGE / relative / "__init__.py").is_file():
        return f"{relative}/"
    return None


def unmapped_modules(named: set[str], root: Path = ROOT) -> list[str]:
    """The package's modules that no concept names, dotted. A sub-package is mapped whole when it is
    named itself ("grading"), otherwise module by module ("models.llama", "models.minilm", ...)."""
    def walk(folder: Path, prefix: str) -> list[str]:
        missing = []
        for path in sorted(folder.iterdir()):
            dotted = prefix + path.stem
            if path.suffix == ".py" and path.stem != "__init__":
                missing += [] if dotted in named else [dotted]
            elif path.is_dir() and (path / "__init__.py").is_file() and dotted not in named:
                missing += walk(path, dotted + ".")
        return missing
    return walk(root / PACKAGE, "")


def problems(course: Course, root: Path = ROOT) -> list[str]:
    """What in the manifest disagrees with the repository (empty when nothing does)."""
    found = []
    listed = [n.folder for n in course.notebooks]
    present = source_notebooks(root)
    for folder in sorted(set(present) - set(listed)):
        found.append(f"notebooks/{folder}/{folder}.ipynb has no [[notebook]] entry in {MANIFEST}: add one "
                     "(folder, title, build, see, site), then run `make maps`")
    for folder in sorted(set(listed) - set(present)):
        found.append(f"{MANIFEST} lists notebook {folder!r}, but notebooks/{folder}/{folder}.ipynb does not exist")
    if len(set(listed)) != len(listed):
        found.append(f"{MANIFEST} lists a notebook twice: {sorted(f for f in listed if listed.count(f) > 1)}")
    if listed != sorted(listed):
        found.append(f"{MANIFEST}: the [[notebook]] entries are not in course order: {listed}")
    for notebook in course.notebooks:
        path = root / notebook.source_path
        if not path.is_file():
            continue
        asked, named = exercises(path), build_names(notebook)
        if not_exercises := [n for n in named if n not in asked]:
            found.append(f"{MANIFEST}: {notebook.folder}'s build names {not_exercises}, which its solution cells "
                         f"do not define (its exercises: {asked})")
        if not_named := [n for n in asked if n not in named]:
            found.append(f"{MANIFEST}: {notebook.folder}'s build does not name the exercise(s) {not_named}; "
                         "name each in backticks")
    numbers = {n.number for n in course.notebooks}
    for concept in course.concepts:
        if module_file(concept.module, root) is None:
            found.append(f"{MANIFEST}: concept {concept.name!r}: module {concept.module!r} is neither "
                         f"{PACKAGE}/{concept.module.replace('.', '/')}.py nor a package folder")
        if unknown := [n for n in concept.notebooks if n not in numbers]:
            found.append(f"{MANIFEST}: concept {concept.name!r} lists notebook(s) {unknown}, which no "
                         "[[notebook]] entry has")
    for module in unmapped_modules({c.module for c in course.concepts}, root):
        found.append(f"{PACKAGE}/{module_file(module, root)} is in no [[concept]] entry of {MANIFEST}: "
                     "add its concept (name, module, names, notebooks)")
    return found


# ---------------------------------------------------------------------------------- rendering
NO_BREAK = "\x00"


def _wrap(text: str, width: int, indent: str = "", first: str = "") -> str:
    """Re-flow `text` (paragraphs separated by blank lines) to `width`, never inside `code` or $maths$."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    keep = lambda match: match.group(0).replace(" ", NO_BREAK)  # noqa: E731
    return "\n\n".join(
        textwrap.fill(re.sub(r"`[^`]*`|\$[^$]*\$", keep, p), width, initial_indent=first if i == 0 else indent,
                      subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
        for i, p in enumerate(paragraphs)).replace(NO_BREAK, " ")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _series(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _fill(template: str, where: str, values: dict[str, str]) -> str:
    try:
        return template.format_map(values)
    except (KeyError, ValueError, IndexError) as error:
        raise MapsError(f"{MANIFEST}: {where}: cannot fill {error} (the placeholders are "
                        f"{', '.join('{' + k + '}' for k in values)}; write {{{{ for a brace)") from None


def _models(course: Course, markdown: bool) -> str:
    models: dict[str, tuple[str, list[str]]] = {}
    for notebook in course.notebooks:
        if notebook.model:
            name, what = notebook.model["name"], notebook.model["what"]
            models.setdefault(name, (what, []))[1].append(notebook.number)
    if not models:
        raise MapsError(f"{MANIFEST}: [course] text uses {{models}}, but no [[notebook]] has a model")
    return _series([
        f"{'**' + name + '**' if markdown else name} ({what}, notebook{'s' if len(ns) > 1 else ''} "
        f"{_series(ns)})" for name, (what, ns) in models.items()])


def _course_values(course: Course, markdown: bool) -> dict[str, str]:
    count = len(course.notebooks)
    word = NUMBER_WORDS[count] if count < len(NUMBER_WORDS) else str(count)
    return {"count": word, "Count": word.capitalize(), "models": _models(course, markdown),
            "titles": ", ".join(f"{n.number} {n.title}" for n in course.notebooks)}


def course_table(course: Course, root: Path) -> str:
    rows = ["| notebook | you build | you see |", "|---|---|---|"]
    rows += [f"| [{n.number} {_cell(n.title)}]({n.solutions_path}) | {_cell(n.build)} | {_cell(n.see)} |"
             for n in course.notebooks]
    return "\n".join(rows)


def _module_lists(course: Course, root: Path) -> dict[str, str]:
    concept_modules, helper_modules = [], []
    for concept in course.concepts:
        shown = module_file(concept.module, root) or concept.module
        if any(c.module == concept.module and c.notebooks for c in course.concepts):
            concept_modules.append(shown)
        else:
            helper_modules.append(shown)
    return {"modules": ", ".join(dict.fromkeys(concept_modules)),
            "helpers": ", ".join(dict.fromkeys(helper_modules))}


def layout(course: Course, root: Path, width: int = 100, short: int = 14) -> str:
    """A fenced block: each path, then its text in one of two columns (short paths, long paths)."""
    columns = [max((len(f.path) for f in course.folders if (len(f.path) <= short) == is_short), default=0) + 2
               for is_short in (True, False)]
    values = _module_lists(course, root)
    lines = []
    for folder in course.folders:
        column = columns[0] if len(folder.path) <= short else columns[1]
        text = _fill(folder.text, f"[[folder]] {folder.path}", values)
        lines.append(_wrap(text, width, indent=" " * column, first=folder.path.ljust(column)))
    return "```\n" + "\n".join(lines) + "\n```"


def module_map(course: Course, root: Path) -> str:
    rows = ["| concept (notebooks) | module | main names |", "|---|---|---|"]
    for c in course.concepts:
        concept = _cell(c.name) + (f" ({', '.join(c.notebooks)})" if c.notebooks else "")
        module = f"`{module_file(c.module, root) or c.module}`"
        rows.append(f"| {concept} | {module} | {', '.join(f'`{n}`' for n in c.names)} |")
    return "\n".join(rows)


def site_opening(course: Course, root: Path) -> str:
    return _wrap(_fill(course.intro, "[course] intro", _course_values(course, markdown=True)), 80)


def site_list(course: Course, root: Path) -> str:
    entries = [f"{n.number} · [{n.title}]({n.solutions_path})\n" + _wrap(n.site, 80, indent="  ", first=": ")
               for n in course.notebooks]
    entries.append("[Theory](solutions/theory.md)\n" + _wrap(course.theory, 80, indent="  ", first=": "))
    return "\n\n".join(entries)


def abstract(course: Course, root: Path) -> str:
    text = _fill(course.abstract, "[course] abstract", _course_values(course, markdown=False))
    return "abstract: >-\n" + _wrap(text, 92, indent="  ", first="  ")


# (file, region, renderer, comment syntax)
REGIONS = [
    ("README.md", "course table", course_table, "html"),
    ("README.md", "layout", layout, "html"),
    ("lib/README.md", "module map", module_map, "html"),
    ("site/intro.md", "opening", site_opening, "html"),
    ("site/intro.md", "course list", site_list, "html"),
    ("CITATION.cff", "abstract", abstract, "hash"),
]


def markers(region: str, syntax: str) -> tuple[str, str]:
    begin = f"BEGIN GENERATED: {region} (from {MANIFEST} by `{COMMAND}`; edit that, not this)"
    end = f"END GENERATED: {region}"
    return (f"<!-- {begin} -->", f"<!-- {end} -->") if syntax == "html" else (f"# {begin}", f"# {end}")


def replace_region(text: str, file: str, region: str, body: str, syntax: str) -> str:
    """`text` with the lines between `region`'s markers replaced by `body` (markers rewritten too)."""
    begin, end = markers(region, syntax)
    opener = "<!-- " if syntax == "html" else "# "
    begin_re = re.compile(rf"^{re.escape(opener)}BEGIN GENERATED: {re.escape(region)}\b.*$", re.M)
    end_re = re.compile(rf"^{re.escape(end)}[ \t]*$", re.M)
    starts, ends = list(begin_re.finditer(text)), list(end_re.finditer(text))
    if len(starts) != 1 or len(ends) != 1 or starts[0].start() > ends[0].start():
        raise MapsError(
            f"{file}: expected one line starting {opener}BEGIN GENERATED: {region} and, after it, one line "
            f"{end!r}; found {len(starts)} and {len(ends)}. Put them back around the {region} "
            f"(`{COMMAND}` writes what is between them)")
    return text[:starts[0].start()] + f"{begin}\n{body}\n{end}" + text[ends[0].end():]


def render(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Every file the maps live in: {path: (committed text, text with fresh maps)}."""
    course = load(root)
    found = problems(course, root)
    if found:
        raise MapsError(f"{MANIFEST} disagrees with the repository:\n  " + "\n  ".join(found))
    files: dict[str, tuple[str, str]] = {}
    for file, region, renderer, syntax in REGIONS:
        if file not in files:
            text = (root / file).read_text()
            files[file] = (text, text)
        old, new = files[file]
        files[file] = (old, replace_region(new, file, region, renderer(course, root), syntax))
    return files


def stale(root: Path = ROOT) -> dict[str, str]:
    """{path: a unified diff of committed -> fresh} for every file whose maps are stale."""
    return {file: "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                               f"{file} (committed)", f"{file} (from {MANIFEST})"))
            for file, (old, new) in render(root).items() if old != new}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print what is stale and exit 1; write nothing")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        files = render(args.root)
    except MapsError as error:
        print(f"maps: {error}", file=sys.stderr)
        return 2
    changed = [file for file, (old, new) in files.items() if old != new]
    if args.check:
        for file in changed:
            print(f"maps: {file} is stale against {MANIFEST}: run `{COMMAND}`")
        return 1 if changed else 0
    for file in changed:
        (args.root / file).write_text(files[file][1])
        print(f"maps: wrote {file}")
    if not changed:
        print(f"maps: {', '.join(files)} agree with {MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
