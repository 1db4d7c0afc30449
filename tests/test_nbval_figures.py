"""tools/nbval_figures.py: nbval compares figures as well as text.

A notebook with one figure is executed, then its committed figure is replaced: by the same picture
with antialiasing-sized noise (must pass), and by another picture (must fail, and only with the plugin:
plain nbval skips image/png).
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import course  # noqa: E402

PLOT = """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([0, 1, 2], [0, 1, 4])
plt.show()
print("drawn")"""


def nbval(path: Path, *plugin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", str(path), *plugin,
                           "-p", "no:cacheprovider", "-q", "--rootdir", str(path.parent)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PLOT)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return course.execute(nb, ROOT)


def with_figure(nb, edit, path: Path) -> Path:
    nb = nbformat.from_dict(nb)                                   # a copy
    out = next(o for o in nb.cells[0].outputs if "image/png" in o.get("data", {}))
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(out.data["image/png"]))).convert("RGBA"))
    edited = edit(pixels.astype(int)).clip(0, 255).astype(np.uint8)
    assert (edited != pixels).any()                               # the edit changed the picture
    buf = io.BytesIO()
    Image.fromarray(edited).save(buf, format="PNG")
    out.data["image/png"] = base64.b64encode(buf.getvalue()).decode()
    nbformat.write(nb, path)
    return path


def test_a_figure_with_antialiasing_noise_passes(executed, tmp_path):
    def noise(p):
        p[10:13, 20, :3] += np.where(p[10:13, 20, :3] >= 1, -1, 1)  # 3 pixels, 1 level (white stays in range)
        return p
    run = nbval(with_figure(executed, noise, tmp_path / "noise.ipynb"), "-p", "tools.nbval_figures")
    assert run.returncode == 0, run.stdout[-2000:]


def test_another_picture_fails_with_the_plugin_only(executed, tmp_path):
    path = with_figure(executed, lambda p: np.concatenate([p[:, 40:], p[:, :40]], axis=1),
                       tmp_path / "moved.ipynb")                  # the curve moved 40 pixels
    plain = nbval(path)
    assert plain.returncode == 0, plain.stdout[-2000:]            # nbval alone does not look at figures
    run = nbval(path, "-p", "tools.nbval_figures")
    assert run.returncode == 1, run.stdout[-2000:]
    assert "not the same picture as the committed one" in run.stdout
