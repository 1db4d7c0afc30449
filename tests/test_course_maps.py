"""The course's maps agree with its manifest, and the manifest with the course.

course.toml lists each notebook and each concept of the package; `make maps` (tools/maps.py)
writes from it README.md's course table and layout block, lib/README.md's module map,
site/intro.md's opening and notebook list, and CITATION.cff's abstract. Here:

* the committed maps are what `make maps` would write (a stale one is named, with the command);
* every notebooks/NN_name/NN_name.ipynb has an entry and every entry a notebook, each `build` line
  names exactly its notebook's exercises, every module of the package is mapped;
* every module and name the manifest lists exists in the package (imported, not read);
* the layout block lists every tracked top-level folder, and nothing that does not exist;
* on a small repository of its own: a hand edit inside a generated region, a new notebook without
  an entry, an unnamed exercise, an unmapped module and a lost marker are each caught, and
  `make maps` keeps the prose around the regions byte for byte.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import maps  # noqa: E402

COURSE = maps.load()


def test_committed_maps_are_fresh():
    stale = maps.stale()
    assert not stale, "\n\n".join(
        f"{file} is stale against course.toml: run `make maps`\n" + "".join(diff.splitlines(True)[:40])
        for file, diff in stale.items())


def test_manifest_agrees_with_the_repository():
    found = maps.problems(COURSE)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("concept", COURSE.concepts, ids=lambda c: f"{c.module}:{c.name[:30]}")
def test_listed_module_exports_each_listed_name(concept):
    module = f"transformer_course.{concept.module}"
    assert importlib.util.find_spec(module) is not None, f"course.toml: concept {concept.name!r}: no module {module}"
    if not concept.names:                   # __main__ runs the tour when imported: only its existence
        return
    loaded = importlib.import_module(module)
    missing = [name for name in concept.names if not hasattr(loaded, name)]
    assert not missing, f"course.toml: concept {concept.name!r} lists {missing}, which {module} does not define"


def test_layout_lists_every_tracked_top_level_folder():
    listed = {f.path.rstrip("/") for f in COURSE.folders}
    assert not (gone := sorted(p for p in listed if not (ROOT / p).exists())), \
        f"course.toml's [[folder]] entries name {gone}, which do not exist"
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git work tree ({error}): the tracked folders are unknown")
    tracked = {line.split("/")[0] for line in files.splitlines() if "/" in line}
    assert not (unlisted := sorted(tracked - {p.split("/")[0] for p in listed})), \
        f"tracked top-level folder(s) {unlisted} are not in course.toml's [[folder]] entries (README's layout)"


def test_citation_abstract_is_yaml_text():
    yaml = pytest.importorskip("yaml")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["abstract"].startswith("Jupyter notebooks") and citation["abstract"].endswith("."), \
        citation["abstract"]
    assert "GENERATED" not in citation["abstract"], "the markers are comments, not part of the abstract"
    assert citation["title"].startswith("Transformer, First Principles"), "keys around the region survive"


# ------------------------------------------------------------------ the mechanism, on a toy repo
def _notebook(*solutions: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# title"]}]
    cells += [{"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": f"s{i}"}},
               "source": [source], "outputs": [], "execution_count": None} for i, source in enumerate(solutions)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


MANIFEST = '''
[course]
intro = "A course of {count} notebook that runs {models}."
theory = "The derivations."
abstract = "{Count} notebook: {titles}; it runs {models}."

[[notebook]]
folder = "01_first"
title = "First"
build = "`alpha`, `Beta`"
see = "a | b"
site = "You write `alpha` and $x + y$."
model = { name = "Tiny-1", what = "a toy" }

[[concept]]
name = "the first concept"
module = "first"
names = ["alpha"]
notebooks = ["01"]

[[concept]]
name = "cases"
module = "cases"
names = []
notebooks = []

[[folder]]
path = "lib/"
text = "the package: {modules}; helpers: {helpers}"
'''


def _region(file: str, name: str, syntax: str = "html") -> str:
    begin, end = maps.markers(name, syntax)
    return f"{begin}\nold text\n{end}"


@pytest.fixture
def toy(tmp_path) -> Path:
    (tmp_path / "course.toml").write_text(MANIFEST)
    (tmp_path / "notebooks/01_first").mkdir(parents=True)
    (tmp_path / "notebooks/01_first/01_first.ipynb").write_text(
        _notebook("def alpha(x):\n    return x\n", "class Beta:\n    pass\n\ndef _helper():\n    pass\n"))
    package = tmp_path / maps.PACKAGE
    (package / "cases").mkdir(parents=True)
    for path in ("__init__.py", "first.py", "cases/__init__.py", "cases/one.py"):
        (package / path).write_text("")
    (tmp_path / "lib/README.md").write_text(f"# lib\n\nabove\n\n{_region('', 'module map')}\n\nbelow\n")
    (tmp_path / "README.md").write_text(
        f"# T\n\n## The course\n\n{_region('', 'course table')}\n\nprose\n\n## Layout\n\n{_region('', 'layout')}\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site/intro.md").write_text(
        f"# T\n\n{_region('', 'opening')}\n\nmiddle\n\n{_region('', 'course list')}\n\nend\n")
    (tmp_path / "CITATION.cff").write_text(f"title: T\n{_region('', 'abstract', 'hash')}\nlicense: MIT\n")
    assert maps.main(["--root", str(tmp_path)]) == 0
    return tmp_path


def test_toy_maps_are_written_and_prose_kept(toy):
    assert maps.stale(toy) == {}
    readme = (toy / "README.md").read_text()
    assert "| [01 First](solutions/01_first/01_first.ipynb) | `alpha`, `Beta` | a \\| b |" in readme
    assert readme.startswith("# T\n\n## The course\n\n<!-- BEGIN GENERATED: course table") and "\n\nprose\n\n" in readme
    assert "lib/  the package: first.py; helpers: cases/" in readme
    assert "| the first concept (01) | `first.py` | `alpha` |" in (toy / "lib/README.md").read_text()
    intro = (toy / "site/intro.md").read_text()
    assert "A course of one notebook that runs **Tiny-1** (a toy, notebook 01)." in intro
    assert "01 · [First](solutions/01_first/01_first.ipynb)\n: You write `alpha` and $x + y$." in intro
    assert "\n\nmiddle\n\n" in intro and intro.endswith("\n\nend\n")
    citation = (toy / "CITATION.cff").read_text()
    assert "abstract: >-\n  One notebook: 01 First; it runs Tiny-1 (a toy, notebook 01).\n" in citation
    assert citation.startswith("title: T\n# BEGIN GENERATED: abstract") and citation.endswith("\nlicense: MIT\n")


def test_a_hand_edit_inside_a_region_is_stale_and_make_maps_restores_it(toy, capsys):
    path = toy / "lib/README.md"
    fresh = path.read_text()
    path.write_text(fresh.replace("`alpha` |", "`alpha`, `gamma` |"))
    assert list(maps.stale(toy)) == ["lib/README.md"]
    assert maps.main(["--check", "--root", str(toy)]) == 1
    assert "lib/README.md is stale against course.toml: run `make maps`" in capsys.readouterr().out
    assert path.read_text() != fresh, "--check writes nothing"
    assert maps.main(["--root", str(toy)]) == 0
    assert path.read_text() == fresh


def test_a_manifest_edit_makes_the_committed_maps_stale(toy):
    manifest = toy / "course.toml"
    manifest.write_text(manifest.read_text().replace('see = "a | b"', 'see = "a and b"'))
    assert list(maps.stale(toy)) == ["README.md"]


def test_a_new_notebook_needs_an_entry(toy, capsys):
    (toy / "notebooks/02_second").mkdir()
    (toy / "notebooks/02_second/02_second.ipynb").write_text(_notebook("def gamma():\n    pass\n"))
    assert maps.main(["--root", str(toy)]) == 2
    assert "notebooks/02_second/02_second.ipynb has no [[notebook]] entry in course.toml" in capsys.readouterr().err


def test_the_build_line_names_exactly_the_exercises(toy):
    manifest = toy / "course.toml"
    manifest.write_text(manifest.read_text().replace("`alpha`, `Beta`", "`alpha`, `delta`"))
    found = "\n".join(maps.problems(maps.load(toy), toy))
    assert "01_first's build names ['delta'], which its solution cells do not define" in found
    assert "01_first's build does not name the exercise(s) ['Beta']" in found


def test_every_module_is_mapped_and_listed_modules_exist(toy):
    (toy / maps.PACKAGE / "second.py").write_text("")
    manifest = toy / "course.toml"
    manifest.write_text(manifest.read_text().replace('module = "first"', 'module = "frist"'))
    found = "\n".join(maps.problems(maps.load(toy), toy))
    assert "lib/transformer_course/second.py is in no [[concept]] entry" in found
    assert "lib/transformer_course/first.py is in no [[concept]] entry" in found
    assert "module 'frist' is neither lib/transformer_course/frist.py nor a package folder" in found
    assert "cases" not in found, "a sub-package named whole maps its modules"


def test_a_sub_package_is_mapped_whole_or_module_by_module(toy):
    manifest = toy / "course.toml"
    manifest.write_text(manifest.read_text().replace('module = "cases"', 'module = "cases.one"'))
    assert maps.problems(maps.load(toy), toy) == []
    assert "`cases/one.py`" in maps.render(toy)["lib/README.md"][1]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("<!-- END GENERATED: course table -->\n", ""), "found 1 and 0"),
    (lambda t: t + t, "found 2 and 2"),
])
def test_a_lost_or_doubled_marker_is_named(toy, edit, message, capsys):
    readme = toy / "README.md"
    readme.write_text(edit(readme.read_text()))
    assert maps.main(["--root", str(toy)]) == 2
    error = capsys.readouterr().err
    assert "README.md: expected one line starting <!-- BEGIN GENERATED: course table" in error and message in error


def test_a_bad_manifest_entry_is_named(toy):
    manifest = toy / "course.toml"
    manifest.write_text(manifest.read_text().replace('title = "First"', 'titel = "First"'))
    with pytest.raises(maps.MapsError, match=r"\[\[notebook\]\] #1 \(01_first\) lacks title"):
        maps.load(toy)
    manifest.write_text(MANIFEST.replace('names = ["alpha"]', 'names = "alpha"'))
    with pytest.raises(maps.MapsError, match=r"\[\[concept\]\] #1 \(the first concept\): names must be a list of strings"):
        maps.load(toy)
    manifest.write_text(MANIFEST.replace("{count}", "{number}"))
    with pytest.raises(maps.MapsError, match=r"\[course\] intro: cannot fill 'number'"):
        maps.render(toy)
