"""`make lab` (students) and `make lab-instructor` start and show what each nbgrader role needs.

Each view is started through make, the way the README says, on a free loopback port; the test
reads the page configuration JupyterLab sends to the browser (which nbgrader plugins are off)
and asks the server for nbgrader's routes (which server extensions are on).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

PLUGINS = ["formgrader", "create-assignment", "course-list", "assignment-list", "validate-assignment"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    req = urllib.request.Request(url)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def start(target: str):
    port = free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", target, f"LAB_PORT={port}",
         "LAB_ARGS=--no-browser --IdentityProvider.token="],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"`make {target}` exited {proc.returncode}:\n{proc.stdout.read()[-3000:]}")
        try:
            if get(base + "/api/status")[0] == 200:
                return proc, base
        except OSError:
            pass
        time.sleep(0.5)
    stop(proc)
    raise AssertionError(f"`make {target}` did not answer within 90 s")


def stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def disabled_plugins(base: str) -> set[str]:
    status, html = get(base + "/lab")
    assert status == 200
    data = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                html, re.S).group(1))
    return {name.split(":", 1)[1] for name in data.get("disabledExtensions", []) if name.startswith("@jupyter/nbgrader:")}


@pytest.mark.parametrize("target, hidden, routes", [
    ("lab", {"formgrader", "create-assignment", "course-list", "assignment-list"},
     {"/formgrader": 404, "/assignments": 404, "/courses": 404, "/assignments/validate": 405}),
    ("lab-instructor", {"course-list", "assignment-list"},
     {"/formgrader": 302, "/assignments": 404, "/courses": 404, "/assignments/validate": 405}),
])
def test_each_role_sees_its_own_nbgrader_panels(target, hidden, routes):
    proc, base = start(target)
    try:
        assert disabled_plugins(base) == hidden, target
        assert "validate-assignment" not in hidden       # both roles keep the Validate button
        got = {route: get(base + route)[0] for route in routes}
        assert got == routes, target                    # 405: the Validate route exists (it takes POST)
    finally:
        stop(proc)


def test_the_lab_targets_add_allow_root_only_for_root(tmp_path):
    # Jupyter refuses root without --allow-root; a normal user must not get the flag. `id` is
    # replaced by one that answers like a normal user, and make prints the command it would run.
    fake = tmp_path / "id"
    fake.write_text("#!/bin/sh\necho 1000\n")
    fake.chmod(0o755)
    as_user = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True,
                             env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"), check=True).stdout
    as_root = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "jupyter lab" in as_user and "--allow-root" not in as_user
    assert ("--allow-root" in as_root) == (os.geteuid() == 0)
