"""The lock files, environment.yml and pyproject.toml agree."""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lock  # noqa: E402


def pins(path):
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[lock.name_of(name)] = version
    return out


def conda_pip_pins():
    text = (ROOT / "environment.yml").read_text()
    found = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)==([^\s]+)$", text, re.M)
    return {lock.name_of(n): v for n, v in found}


def test_environment_yml_lists_the_top_level_packages_at_the_locked_versions():
    locked = {**pins(ROOT / "requirements" / "lock.txt"), **pins(ROOT / "requirements" / "test-lock.txt")}
    conda = conda_pip_pins()
    top = [lock.name_of(r) for r in lock.top_level(ROOT / "requirements" / "core.in")
           + lock.top_level(ROOT / "requirements" / "test.in")]
    assert sorted(conda) == sorted(set(top)), "environment.yml and requirements/*.in list different packages"
    for name, version in conda.items():
        assert locked.get(name) == version, f"{name}: environment.yml has {version}, the lock has {locked.get(name)}"


def test_every_top_level_requirement_is_locked():
    core = pins(ROOT / "requirements" / "lock.txt")
    test = pins(ROOT / "requirements" / "test-lock.txt")
    for req in lock.top_level(ROOT / "requirements" / "core.in"):
        assert lock.name_of(req) in core, f"{req} missing from lock.txt"
    for req in lock.top_level(ROOT / "requirements" / "test.in"):
        assert lock.name_of(req) in core or lock.name_of(req) in test, f"{req} missing from the locks"


def test_pytorch_is_optional_and_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(lock.name_of(d) == "torch" for d in project["dependencies"])
    assert project["optional-dependencies"]["torch"] == ["torch==2.13.0"]
    assert "torch" not in pins(ROOT / "requirements" / "lock.txt")
    assert pins(ROOT / "requirements" / "test-lock.txt")["torch"].startswith("2.13.0")


def test_package_dependencies_are_in_the_lock():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = pins(ROOT / "requirements" / "lock.txt")
    for dep in project["dependencies"]:
        assert lock.name_of(dep) in core, f"{dep} (pyproject) is not in lock.txt"
