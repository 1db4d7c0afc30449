"""Shared fixtures for the transformer_course test suite (kept deliberately small)."""

import ast
import functools
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh, seeded generator per test, so tests never share random state."""
    return np.random.default_rng(20240601)



# ------------------------------------------------------------------ two workers (`make test`)
# `make test` runs the suite on two workers (pytest-xdist). xdist's own `--dist loadgroup` does not
# group under pytest 9 (it renames `item._nodeid`, which pytest 9 no longer reads), so the course
# brings its own scheduler: a test module that defines a module- or session-scoped fixture (a
# grading run, a hub, a site server, a loaded model, a fixed port) runs whole on one worker, so the
# fixture is built once and never by two workers at once; every other test is scheduled alone.
# The slow tests are handed out first, so no worker starts a long one while the other idles.

_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def module_shares_fixtures(path: str) -> bool:
    """Whether the test file at `path` (relative to the repository) defines a fixture whose scope is
    wider than one test (`@pytest.fixture(scope="module")`, "session", ...)."""
    file = _ROOT / path
    if not file.is_file() or file.suffix != ".py":
        return False
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.fixture", "fixture"):
            for kw in node.keywords:
                if kw.arg == "scope" and not (isinstance(kw.value, ast.Constant) and kw.value.value == "function"):
                    return True
    return False


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return path if module_shares_fixtures(path) else nodeid


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return scope_of(nodeid)

    config.option.loadscopereorder = False        # keep the order below: slow first
    return ModuleFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Slow tests first (notebook executions, grading runs, servers, models): a stable sort."""
    def slow(item):
        return item.get_closest_marker("slow") is not None or module_shares_fixtures(
            item.nodeid.split("::", 1)[0])
    items.sort(key=lambda item: not slow(item))
