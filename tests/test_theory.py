"""notebooks/theory.md: its structure, the notebooks' links into it, its maths markup, and its claims.

* Every required heading is there, exactly, and headings give unique GitHub-style slugs.
* Every ``theory.md#slug`` link in a notebook's markdown cells points to a heading that exists,
  through a relative path that reaches notebooks/theory.md.
* Every ``§N`` / ``§N.M`` cited by a notebook, by the package's docstrings or by theory.md
  itself is a section of theory.md.
* The maths markup is balanced ($$ blocks, inline $ pairs, braces, \\left/\\right,
  \\begin/\\end) and uses no custom macros and no ``align`` inside ``$$``.
* Numeric spot-checks of the claims, mostly through ``transformer_course``, including the
  numbers printed in theory.md's tables.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import transformer_course as tc

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
THEORY = NOTEBOOKS / "theory.md"
LIB = ROOT / "lib" / "transformer_course"

REQUIRED_HEADINGS = [
    "# Theory: the Transformer from first principles",
    "## 1. Attention",
    "### 1.1 Attention as a soft dictionary lookup",
    "### 1.2 Softmax and the max-shift",
    "### 1.3 Masks",
    "## 2. Scaling",
    "### 2.1 The variance of a dot product",
    "### 2.2 The softmax Jacobian and saturation",
    "## 3. Multi-head attention",
    "### 3.1 Heads as slices of one projection",
    "### 3.2 Parameter count",
    "## 4. Positional encoding",
    "### 4.1 The sinusoidal encoding",
    "### 4.2 Shifts are rotations",
    "### 4.3 Similarity decays with distance",
    "## 5. The encoder block",
    "### 5.1 Layer normalisation",
    "### 5.2 The position-wise feed-forward network",
    "### 5.3 Residual connections, post-LN and pre-LN",
    "### 5.4 Why every row has the same norm after layer norm",
    "## 6. Encoder and decoder",
    "### 6.1 The encoder",
    "### 6.2 The decoder and the causal mask",
    "## 7. Cost",
    "### 7.1 Time and memory",
    "### 7.2 The online-softmax identity",
]

LINK = re.compile(r"((?:\.\./|\./)*)theory\.md#([^)\s\"'>\]]+)")
SECTION_REF = re.compile(r"§\s?(\d+(?:\.\d+)*)")


# ------------------------------------------------------------------ helpers
def _theory_text() -> str:
    assert THEORY.is_file(), f"{THEORY.relative_to(ROOT)} is missing"
    return THEORY.read_text(encoding="utf-8")


def _strip_code(text: str) -> str:
    """Drop fenced code blocks and inline code spans (they may hold a literal $ or #)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every ATX heading outside code."""
    out = []
    for line in _strip_code(text).splitlines():
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append((len(m.group(1)), m.group(2)))
    return out


def github_slug(title: str) -> str:
    """GitHub-style anchor: lower-case, drop what is not alphanumeric, space or hyphen, spaces -> hyphens."""
    title = title.strip().lower()
    title = re.sub(r"[^a-z0-9 \-]", "", title)
    return title.replace(" ", "-")


def _slugs(text: str) -> list[str]:
    return [github_slug(title) for _, title in _headings(text)]


def _section_numbers(text: str) -> set[str]:
    numbers = set()
    for level, title in _headings(text):
        m = re.match(r"^(\d+(?:\.\d+)*)\.?\s", title)
        if m and level >= 2:
            numbers.add(m.group(1))
    return numbers


def _notebook_markdown() -> dict[str, str]:
    """{notebook path relative to ROOT: its markdown cells joined}, for notebooks/*/*.ipynb."""
    found = {}
    for nb in sorted(NOTEBOOKS.glob("*/*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        found[nb.relative_to(ROOT).as_posix()] = "\n\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells
            if c.get("cell_type") == "markdown"
        )
    return found


def _math_segments(text: str) -> tuple[list[str], list[str]]:
    """(display segments, inline segments) of the maths in ``text``."""
    body = _strip_code(text)
    display = re.findall(r"\$\$(.*?)\$\$", body, flags=re.S)
    rest = re.sub(r"\$\$.*?\$\$", " ", body, flags=re.S)
    inline = []
    for paragraph in re.split(r"\n\s*\n", rest):
        inline += re.findall(r"(?<!\\)\$(.+?)(?<!\\)\$", paragraph, flags=re.S)
    return display, inline


# ------------------------------------------------------------------ 1. structure
def test_theory_exists_with_every_required_heading():
    text = _theory_text()
    lines = {line.rstrip() for line in _strip_code(text).splitlines()}
    missing = [h for h in REQUIRED_HEADINGS if h not in lines]
    assert not missing, f"theory.md lacks the headings: {missing}"


def test_required_headings_come_in_order_and_slugs_are_unique():
    text = _theory_text()
    present = [f"{'#' * level} {title}" for level, title in _headings(text)]
    order = [present.index(h) for h in REQUIRED_HEADINGS]
    assert order == sorted(order), "the required headings are out of order"
    slugs = _slugs(text)
    duplicates = {s for s in slugs if slugs.count(s) > 1}
    assert not duplicates, f"headings with the same slug (GitHub would suffix them): {duplicates}"


def test_slug_function_matches_known_examples():
    assert github_slug("2.1 The variance of a dot product") == "21-the-variance-of-a-dot-product"
    assert github_slug("5.3 Residual connections, post-LN and pre-LN") == "53-residual-connections-post-ln-and-pre-ln"
    assert github_slug("1.2 Softmax and the max-shift") == "12-softmax-and-the-max-shift"


def test_slugs_agree_with_myst_heading_anchors():
    """The site (myst_heading_anchors) must produce the same anchors as GitHub for our headings."""
    base = pytest.importorskip("myst_parser.mdit_to_docutils.base")
    for _, title in _headings(_theory_text()):
        assert base.default_slugify(title) == github_slug(title), title


# ------------------------------------------------------------------ 2. links from the notebooks
def test_notebook_links_point_to_existing_theory_sections():
    slugs = set(_slugs(_theory_text()))
    problems = []
    for nb, markdown in _notebook_markdown().items():
        nb_dir = (ROOT / nb).parent
        for prefix, slug in LINK.findall(markdown):
            if (nb_dir / prefix / "theory.md").resolve() != THEORY.resolve():
                problems.append(f"{nb}: {prefix}theory.md#{slug} does not lead to notebooks/theory.md")
            if slug not in slugs:
                problems.append(f"{nb}: theory.md#{slug} -- no such heading")
    assert not problems, "\n".join(problems)


def test_notebook_links_to_theory_md_without_anchor_resolve():
    problems = []
    for nb, markdown in _notebook_markdown().items():
        nb_dir = (ROOT / nb).parent
        for prefix in re.findall(r"\]\(((?:\.\./|\./)*)theory\.md[)#]", markdown):
            if (nb_dir / prefix / "theory.md").resolve() != THEORY.resolve():
                problems.append(f"{nb}: link {prefix}theory.md does not lead to notebooks/theory.md")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ 3. section citations
def test_sections_cited_by_notebooks_exist():
    numbers = _section_numbers(_theory_text())
    problems = [
        f"{nb}: §{ref}"
        for nb, markdown in _notebook_markdown().items()
        for ref in SECTION_REF.findall(markdown)
        if ref not in numbers
    ]
    assert not problems, "sections cited but absent from theory.md:\n" + "\n".join(problems)


def test_sections_cited_by_the_package_and_by_theory_exist():
    text = _theory_text()
    numbers = _section_numbers(text)
    problems = [f"theory.md: §{ref}" for ref in SECTION_REF.findall(text) if ref not in numbers]
    for py in sorted(LIB.glob("*.py")):
        for ref in re.findall(r"theory\.md\s*§\s?(\d+(?:\.\d+)*)", py.read_text(encoding="utf-8")):
            if ref not in numbers:
                problems.append(f"{py.relative_to(ROOT)}: theory.md §{ref}")
    assert not problems, "\n".join(problems)


def test_every_numbered_section_is_present():
    numbers = _section_numbers(_theory_text())
    for top in range(1, 8):
        assert str(top) in numbers
    assert {"1.1", "1.2", "1.3", "2.1", "2.2", "3.1", "3.2", "4.1", "4.2", "4.3",
            "5.1", "5.2", "5.3", "5.4", "6.1", "6.2", "7.1", "7.2"} <= numbers


# ------------------------------------------------------------------ 4. maths markup
def test_display_math_delimiters_are_balanced():
    body = _strip_code(_theory_text())
    assert body.count("$$") % 2 == 0, "odd number of $$"
    for line in body.splitlines():
        if "$$" in line:
            assert line.strip() == "$$", f"$$ should stand on its own line: {line!r}"


def test_inline_math_dollars_pair_up_within_each_paragraph():
    body = re.sub(r"\$\$.*?\$\$", " ", _strip_code(_theory_text()), flags=re.S)
    for paragraph in re.split(r"\n\s*\n", body):
        n = len(re.findall(r"(?<!\\)\$", paragraph))
        assert n % 2 == 0, f"unpaired $ in paragraph:\n{paragraph[:300]}"


def test_math_segments_are_well_formed():
    display, inline = _math_segments(_theory_text())
    assert len(display) > 20 and len(inline) > 200
    for seg in display + inline:
        braces = re.sub(r"\\[{}]", "", seg)
        assert braces.count("{") == braces.count("}"), f"unbalanced braces: {seg[:200]!r}"
        lefts = len(re.findall(r"\\left(?![A-Za-z])", seg))
        rights = len(re.findall(r"\\right(?![A-Za-z])", seg))
        assert lefts == rights, f"\\left/\\right mismatch: {seg[:200]!r}"
        assert re.findall(r"\\begin\{(\w+\*?)\}", seg) == re.findall(r"\\end\{(\w+\*?)\}", seg), seg[:200]
        assert not re.search(r"\\(newcommand|renewcommand|def|DeclareMathOperator)\b", seg), "custom macro"
    for seg in display:
        assert not re.search(r"\\begin\{(align|equation|gather|multline)\*?\}", seg), (
            "inside $$ use \\begin{aligned}, not a top-level environment"
        )
    for seg in inline:
        assert not seg.startswith((" ", "\n")) and not seg.endswith((" ", "\n")), (
            f"inline maths must not start or end with a space: ${seg}$"
        )


def test_math_parses_with_markdown_it_dollarmath():
    """The parser behind the site (and close to Jupyter's) sees every $ as maths, none as text."""
    markdown_it = pytest.importorskip("markdown_it")
    dollarmath = pytest.importorskip("mdit_py_plugins.dollarmath")
    md = markdown_it.MarkdownIt("commonmark").enable("table").use(dollarmath.dollarmath_plugin)
    tokens = md.parse(_theory_text())
    stray = [
        t.content[:120]
        for t in tokens
        if t.type == "inline"
        for c in (t.children or [])
        if c.type == "text" and "$" in c.content
    ]
    assert not stray, f"$ parsed as text: {stray}"
    n_blocks = sum(t.type == "math_block" for t in tokens)
    assert n_blocks == _strip_code(_theory_text()).count("$$") // 2


# ------------------------------------------------------------------ 5. numeric spot-checks
def _table_row(label: str) -> list[str]:
    """Cells (after the first) of the theory.md table row whose first cell is ``label``."""
    for line in _theory_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no table row {label!r} in theory.md")


# §2.1 -------------------------------------------------------------------
def test_dot_product_variance_is_d_k_and_scaling_restores_one():
    rng = np.random.default_rng(2017)
    n = 20_000
    for d_k in (4, 64, 512):
        q = rng.standard_normal((n, 1, d_k))
        k = rng.standard_normal((n, 1, d_k))
        raw = np.sum(q * k, axis=-1).ravel()
        scaled = tc.attention_scores(q, k).ravel()          # q.k / sqrt(d_k), batched over n pairs
        np.testing.assert_allclose(scaled, raw / np.sqrt(d_k), rtol=1e-10, atol=1e-12)
        assert abs(raw.mean()) < 4 * np.sqrt(d_k / n)
        assert raw.var() == pytest.approx(d_k, rel=0.05)
        assert scaled.var() == pytest.approx(1.0, rel=0.05)


def test_dot_product_variance_with_non_unit_scales():
    rng = np.random.default_rng(3)
    d_k, n, sq, sk = 32, 40_000, 2.0, 0.5
    q = sq * rng.standard_normal((n, d_k))
    k = sk * rng.standard_normal((n, d_k))
    assert np.sum(q * k, axis=1).var() == pytest.approx(d_k * sq**2 * sk**2, rel=0.05)


# §1.2, §1.3 -------------------------------------------------------------
def test_max_shift_invariance_and_no_overflow():
    x = np.array([0.3, -1.2, 2.0, 0.0])
    np.testing.assert_allclose(tc.softmax(x + 1000.0), tc.softmax(x), rtol=1e-12)
    np.testing.assert_allclose(tc.softmax(x - 1000.0), tc.softmax(x), rtol=1e-12)
    assert np.log(np.finfo(np.float64).max) == pytest.approx(709.78, abs=0.01)
    assert np.log(np.finfo(np.float32).max) == pytest.approx(88.72, abs=0.01)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(x + 1000.0) / np.exp(x + 1000.0).sum()
    assert np.isnan(naive).all()


def test_masks_boolean_equals_additive_and_renormalises():
    rng = np.random.default_rng(5)
    Q, K, V = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    causal = tc.causal_mask(5)
    additive = np.where(causal, 0.0, -np.inf)
    out_b, w_b = tc.scaled_dot_product_attention(Q, K, V, mask=causal)
    out_a, w_a = tc.scaled_dot_product_attention(Q, K, V, mask=additive)
    np.testing.assert_array_equal(w_b, w_a)
    assert (w_b[~causal] == 0).all()
    S = Q @ K.T / 2.0
    for i in range(5):   # the softmax of row i restricted to its allowed keys
        np.testing.assert_allclose(w_b[i, : i + 1], tc.softmax(S[i, : i + 1]), rtol=1e-12)


def test_fully_masked_row_nan_uniform_or_zero():
    scores = np.array([[0.5, -0.2, 1.0]], dtype=np.float32)
    blocked = np.zeros_like(scores, dtype=bool)
    with np.errstate(invalid="ignore"):
        s = np.where(blocked, scores, -np.inf)
        naive = np.exp(s - s.max(-1, keepdims=True))
        naive = naive / naive.sum(-1, keepdims=True)
    assert np.isnan(naive).all()                                             # -inf, naive softmax
    fmin = np.finfo(np.float32).min
    s32 = scores + np.where(blocked, 0, fmin).astype(np.float32)
    np.testing.assert_allclose(tc.softmax(s32), np.full((1, 3), 1 / 3), rtol=1e-6)   # uniform
    s64 = scores.astype(np.float64) - 1e9
    np.testing.assert_allclose(tc.softmax(s64), tc.softmax(scores.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(tc.softmax(np.where(blocked, scores, -np.inf)), np.zeros((1, 3)))
    out, w = tc.scaled_dot_product_attention(np.ones((1, 2)), np.ones((3, 2)), np.ones((3, 2)), mask=blocked)
    assert (out == 0).all() and (w == 0).all()


# §1.1 -------------------------------------------------------------------
def test_self_attention_is_permutation_equivariant():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(6, 8))
    mha = tc.MultiHeadAttention(8, 2, rng=rng)
    perm = rng.permutation(6)
    out, _ = mha(X)
    out_p, _ = mha(X[perm])
    np.testing.assert_allclose(out_p, out[perm], rtol=1e-10, atol=1e-12)


# §2.2 -------------------------------------------------------------------
def _softmax_jacobian_fd(z, h=1e-6):
    J = np.empty((z.size, z.size))
    for j in range(z.size):
        e = np.zeros_like(z)
        e[j] = h
        J[:, j] = (tc.softmax(z + e) - tc.softmax(z - e)) / (2 * h)
    return J


def test_softmax_jacobian_formula_and_bounds():
    rng = np.random.default_rng(7)
    for _ in range(5):
        z = rng.normal(scale=2.0, size=6)
        p = tc.softmax(z)
        J = np.diag(p) - np.outer(p, p)
        np.testing.assert_allclose(_softmax_jacobian_fd(z), J, atol=1e-8)
        np.testing.assert_allclose(J @ np.ones(6), 0, atol=1e-15)
        eig = np.linalg.eigvalsh(J)
        assert eig.min() > -1e-15                               # positive semi-definite
        norm = eig.max()
        assert norm <= 1 - p @ p + 1e-15                        # <= trace
        assert norm <= np.max(2 * p * (1 - p)) + 1e-15 <= 0.5 + 1e-15   # Gershgorin
    p = np.full(5, 0.2)
    assert np.linalg.norm(np.diag(p) - np.outer(p, p), 2) == pytest.approx(1 / 5)
    p = np.array([0.5, 0.5, 0.0])
    assert np.linalg.norm(np.diag(p) - np.outer(p, p), 2) == pytest.approx(0.5)


def test_saturation_bound_and_the_table_in_theory():
    n = 8
    for gap in (2.0, 5.0, 10.0):
        z = np.zeros(n)
        z[0] = gap
        p = tc.softmax(z)
        norm = np.linalg.norm(np.diag(p) - np.outer(p, p), 2)
        assert norm <= 2 * (n - 1) * np.exp(-gap)
    gaps = _table_row("gap $\\Delta$")
    p1s = _table_row("$p_1$")
    norms = _table_row("norm of $J$")
    for g, p1_txt, norm_txt in zip(gaps, p1s, norms):
        gap = float(g.split()[0])
        p1 = 1 / (1 + np.exp(-gap))
        norm = np.linalg.norm(np.diag([p1, 1 - p1]) - np.outer([p1, 1 - p1], [p1, 1 - p1]), 2)
        assert norm == pytest.approx(2 * p1 * (1 - p1), rel=1e-6)
        for txt, value in ((p1_txt, p1), (norm_txt, norm)):
            m = re.fullmatch(r"\$1 - ([\d.]+) \\times 10\^\{(-\d+)\}\$", txt)
            if m:
                assert 1 - value == pytest.approx(float(m.group(1)) * 10 ** int(m.group(2)), rel=0.05)
                continue
            m = re.fullmatch(r"\$([\d.]+) \\times 10\^\{(-\d+)\}\$", txt)
            expected = float(m.group(1)) * 10 ** int(m.group(2)) if m else float(txt)
            assert value == pytest.approx(expected, rel=0.05), (gap, txt, value)


# §3 ---------------------------------------------------------------------
def test_heads_are_column_blocks_and_w_o_is_a_sum_over_heads():
    rng = np.random.default_rng(13)
    d_model, h, n = 12, 3, 5
    d_head = d_model // h
    mha = tc.MultiHeadAttention(d_model, h, rng=rng, bias=False)
    X = rng.normal(size=(n, d_model))
    Qh = tc.split_heads(X @ mha.W_Q, h)
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        np.testing.assert_allclose(Qh[i], X @ mha.W_Q[:, cols], rtol=1e-12)
    out, _ = mha(X)
    total = np.zeros((n, d_model))
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        head, _ = tc.scaled_dot_product_attention(X @ mha.W_Q[:, cols], X @ mha.W_K[:, cols], X @ mha.W_V[:, cols])
        total += head @ mha.W_O[cols, :]
    np.testing.assert_allclose(out, total, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(tc.merge_heads(tc.split_heads(X, h)), X)


def test_parameter_count_is_independent_of_heads():
    rng = np.random.default_rng(0)
    for d_model in (64, 512, 768):
        for h in (1, 2, 8):
            assert tc.MultiHeadAttention(d_model, h, rng=rng).n_parameters == 4 * d_model**2 + 4 * d_model
            assert tc.MultiHeadAttention(d_model, h, rng=rng, bias=False).n_parameters == 4 * d_model**2
    text = _theory_text()
    for n in ("1,048,576", "1,050,624", "2,359,296", "2,362,368", "3,152,384"):
        assert n in text
    assert 4 * 512**2 == 1_048_576 and 4 * 768**2 + 4 * 768 == 2_362_368


def test_encoder_block_parameter_count():
    d = 512
    block = tc.TransformerEncoderBlock(d, 8, rng=np.random.default_rng(1))
    ffn = block.feed_forward
    n_ffn = ffn.W_1.size + ffn.b_1.size + ffn.W_2.size + ffn.b_2.size
    assert n_ffn == 8 * d**2 + 5 * d
    total = block.attention.n_parameters + n_ffn + 4 * d
    assert total == 12 * d**2 + 13 * d == 3_152_384


# §4 ---------------------------------------------------------------------
def test_pe_shift_is_a_rotation():
    d = 16
    pe = tc.positional_encoding(80, d)
    for k in (0, 1, 3, 17):
        M = tc.relative_shift_matrix(k, d)
        np.testing.assert_allclose(pe[k : k + 60], pe[:60] @ M, atol=1e-12)
        np.testing.assert_allclose(M.T @ M, np.eye(d), atol=1e-12)
    M2, M5 = tc.relative_shift_matrix(2, d), tc.relative_shift_matrix(5, d)
    np.testing.assert_allclose(M2 @ M5, tc.relative_shift_matrix(7, d), atol=1e-12)
    np.testing.assert_allclose(tc.relative_shift_matrix(-5, d), M5.T, atol=1e-12)
    # each 2x2 block is [[cos b, -sin b], [sin b, cos b]] with b = k * w_i
    w = tc.frequencies(d)
    b = 3 * w[2]
    np.testing.assert_allclose(tc.relative_shift_matrix(3, d)[4:6, 4:6],
                               [[np.cos(b), -np.sin(b)], [np.sin(b), np.cos(b)]], atol=1e-15)


def test_pe_is_bounded_with_constant_norm():
    d = 64
    pe = tc.positional_encoding(500, d)
    assert np.abs(pe).max() <= 1.0
    np.testing.assert_allclose(np.sum(pe**2, axis=1), d / 2, rtol=1e-12)
    assert tc.frequencies(d)[-1] == pytest.approx(10000 ** (-(d - 2) / d))
    assert len({tuple(np.round(r, 12)) for r in pe}) == 500     # distinct codes


def test_pe_similarity_depends_on_offset_only_and_matches_the_table():
    d = 512
    pe = tc.positional_encoding(1200, d)
    w = tc.frequencies(d)
    for k in (0, 1, 7, 100):
        expected = np.cos(k * w).sum()
        for p in (0, 13, 99):
            assert pe[p] @ pe[p + k] == pytest.approx(expected, abs=1e-9)
    offsets = [int(k) for k in _table_row("offset $k$")]
    values = [float(v) for v in _table_row("similarity")]
    for k, v in zip(offsets, values, strict=True):
        assert np.cos(k * w).sum() == pytest.approx(v, abs=0.051)
    sims = np.cos(np.outer(np.arange(200), w)).sum(axis=1)
    assert (np.diff(sims[:44]) <= 0).all() and sims[44] > sims[43]   # "first uptick at k = 44"
    assert sims[0] == d / 2 and (sims[1:] < d / 2).all()


# §5 ---------------------------------------------------------------------
def test_layer_norm_rows_have_mean_zero_and_the_predicted_norm():
    rng = np.random.default_rng(17)
    d = 32
    x = rng.normal(loc=3.0, scale=rng.uniform(0.2, 5.0, size=(10, 1)), size=(10, d))
    for eps in (1e-5, 0.5):        # a large eps makes the difference from sqrt(d) visible
        y = tc.layer_norm(x, eps=eps)
        var = x.var(axis=1)
        np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-12)
        np.testing.assert_allclose(y.var(axis=1), var / (var + eps), rtol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.sqrt(d * var / (var + eps)), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(tc.layer_norm(x, eps=1e-12), axis=1), np.sqrt(d), rtol=1e-9)
    np.testing.assert_array_equal(tc.layer_norm(np.full((1, d), 4.0)), np.zeros((1, d)))   # constant row -> 0
    np.testing.assert_allclose(tc.layer_norm(7.0 * x + 2.0, eps=1e-12), tc.layer_norm(x, eps=1e-12), atol=1e-9)


def test_layer_norm_jacobian_is_a_scaled_projection():
    rng = np.random.default_rng(19)
    d, eps, h = 8, 1e-5, 1e-6
    x = rng.normal(size=d) * 2.0 + 1.0
    y = tc.layer_norm(x, eps=eps)
    s = np.sqrt(x.var() + eps)
    P = np.eye(d) - np.ones((d, d)) / d
    J = (P - np.outer(y, y) / d) / s
    fd = np.empty((d, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        fd[:, j] = (tc.layer_norm(x + e, eps=eps) - tc.layer_norm(x - e, eps=eps)) / (2 * h)
    np.testing.assert_allclose(fd, J, atol=1e-7)
    eig = np.sort(np.linalg.eigvalsh(J * s))
    assert abs(eig[0]) < 1e-12                                  # null direction 1
    assert eig[1] == pytest.approx(eps / s**2, rel=1e-6)         # along y: 1 - y.y/d = eps/(var+eps)
    np.testing.assert_allclose(eig[2:], 1, atol=1e-12)


def test_pre_and_post_ln_blocks_follow_their_equations():
    rng = np.random.default_rng(23)
    x = rng.normal(size=(5, 16))
    for norm_first in (False, True):
        blk = tc.TransformerEncoderBlock(16, 4, rng=np.random.default_rng(2), norm_first=norm_first)
        out, _ = blk(x)
        ln = tc.layer_norm
        if norm_first:
            z = x + blk.attention(ln(x))[0]
            ref = z + blk.feed_forward(ln(z))
        else:
            z = ln(x + blk.attention(x)[0])
            ref = ln(z + blk.feed_forward(z))
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


# §6.2 -------------------------------------------------------------------
def test_causal_mask_makes_row_i_independent_of_the_future():
    rng = np.random.default_rng(29)
    n, d = 7, 16
    blocks = [tc.TransformerEncoderBlock(d, 4, rng=np.random.default_rng(s)) for s in (1, 2)]
    x = rng.normal(size=(n, d))
    x2 = x.copy()
    x2[4:] = rng.normal(size=(n - 4, d))           # change the future of position 3
    outs = []
    for inp in (x, x2):
        h = inp
        for blk in blocks:
            h, _ = blk(h, mask=tc.causal_mask(n))
        outs.append(h)
    np.testing.assert_allclose(outs[0][:4], outs[1][:4], rtol=1e-12, atol=1e-12)
    assert not np.allclose(outs[0][4:], outs[1][4:])


# §7 ---------------------------------------------------------------------
def test_score_matrix_bytes():
    n = 16384
    assert n * n * np.dtype(np.float32).itemsize == 2**30           # 1 GiB per head
    assert n * n * np.dtype(np.float64).itemsize == 2 * 2**30
    assert 1024**2 * 4 == 4 * 2**20 and 4096**2 * 4 == 64 * 2**20 and 65536**2 * 4 == 16 * 2**30
    assert 16 * 24 * 8 == 3072


def online_softmax_attention(q_block, K, V, block_size):
    """theory.md §7.2: running max m, running sum l, accumulator o; rescale by exp(m_old - m_new)."""
    n_q = q_block.shape[0]
    m = np.full(n_q, -np.inf)
    l = np.zeros(n_q)
    o = np.zeros((n_q, V.shape[1]))
    scale = 1 / np.sqrt(K.shape[1])
    for start in range(0, K.shape[0], block_size):
        Kb, Vb = K[start : start + block_size], V[start : start + block_size]
        s = q_block @ Kb.T * scale                          # one tile (n_q, block)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)                           # exp(-inf) = 0 on the first block
        e = np.exp(s - m_new[:, None])
        l = alpha * l + e.sum(axis=1)
        o = alpha[:, None] * o + e @ Vb
        m = m_new
    return o / l[:, None], m + np.log(l)


def test_online_softmax_equals_the_full_softmax():
    rng = np.random.default_rng(31)
    n, d_k, d_v = 100, 8, 5
    Q, K, V = rng.normal(size=(6, d_k)), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    full, _ = tc.scaled_dot_product_attention(Q, K, V)
    S = tc.attention_scores(Q, K)
    for block in (1, 7, 32, 100):
        out, lse = online_softmax_attention(Q, K, V, block)
        np.testing.assert_allclose(out, full, rtol=1e-12, atol=1e-13)
        m = S.max(axis=1)
        np.testing.assert_allclose(lse, m + np.log(np.exp(S - m[:, None]).sum(axis=1)), rtol=1e-12)


def test_online_softmax_is_stable_for_huge_scores():
    rng = np.random.default_rng(37)
    Q = 300.0 * rng.normal(size=(3, 4))              # scores in the thousands: exp would overflow
    K, V = 300.0 * rng.normal(size=(50, 4)), rng.normal(size=(50, 3))
    full, _ = tc.scaled_dot_product_attention(Q, K, V)
    with np.errstate(over="raise", invalid="raise"):
        out, _ = online_softmax_attention(Q, K, V, 8)
    np.testing.assert_allclose(out, full, rtol=1e-10, atol=1e-12)


# §12 --------------------------------------------------------------------
def _section(number: str) -> str:
    """The text of theory.md's section ``## number.`` up to the next ``## `` heading."""
    text = _theory_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_lora_counts_follow_from_smollm2s_config():
    """§12's parameter counts, computed from the GGUF file's metadata and tensor shapes (no weights read)."""
    smollm2 = pytest.importorskip("transformer_course.smollm2")
    from transformer_course.lora import TARGETS

    contents = smollm2.read_gguf()
    cfg = smollm2.config_from_metadata(contents.metadata)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff, cfg.vocab_size) == \
        (30, 576, 9, 3, 64, 1536, 49152), cfg
    shapes = {t: tuple(contents.shapes[f"blk.0.{t}.weight"]) for t in TARGETS}
    assert shapes == {"attn_q": (576, 576), "attn_k": (192, 576), "attn_v": (192, 576), "attn_output": (576, 576),
                      "ffn_gate": (1536, 576), "ffn_up": (1536, 576), "ffn_down": (576, 1536)}, shapes
    total = sum(int(np.prod(s)) for s in contents.shapes.values())
    r, section = 8, _section("12").replace("{,}", ",")         # $122{,}880$ is 122,880
    per_layer = sum(o * i for o, i in shapes.values())
    adapter = {t: r * (o + i) for t, (o, i) in shapes.items()}
    qv = adapter["attn_q"] + adapter["attn_v"]
    facts = {"134,515,008": total, "538,060,032": 4 * total, "3,538,944": per_layer,
             "28,311,552": cfg.vocab_size * cfg.d_model, "122,880": 8 * qv, "460,800": 30 * qv,
             "2,442,240": 30 * sum(adapter.values())}
    for t, (o, i) in shapes.items():
        facts[f"{o * i:,}"] = o * i
        facts[f"{adapter[t]:,}"] = adapter[t]
        assert f"{100 * adapter[t] / (o * i):.1f} %" in section, (t, adapter[t] / (o * i))
    for written, value in facts.items():
        assert written == f"{value:,}" and written in section, (written, value)
    assert f"{100 * 8 * qv / total:.3f} %" == "0.091 %" and "0.091 %" in section
    assert f"{cfg.vocab_size * cfg.d_model / per_layer:.1f}" == "8.0"
    assert 8 * qv * 8 / 1024 == 960 and 8 * qv * 4 / 1024 == 480 and round(16 * total / 1e9, 2) == 2.15


def test_lora_merge_bound_holds_on_a_real_projection():
    """§12.4: merged and adapter paths differ by at most 2 gamma_{in+r+2} |x| (|W| + s|B||A|)^T, far less in fact."""
    smollm2 = pytest.importorskip("transformer_course.smollm2")
    from transformer_course.lora import lora_forward

    contents = smollm2.read_gguf()
    name = "blk.29.attn_q.weight"
    W = smollm2.dequantize(contents.raw[name], contents.kinds[name], np.float64)
    rng = np.random.default_rng(0)
    r, s = 8, 16 / 8
    x = rng.normal(0, 1, (176, W.shape[1]))
    A, B = rng.normal(0, 1 / np.sqrt(W.shape[1]), (r, W.shape[1])), rng.normal(0, 0.02, (W.shape[0], r))
    u = np.finfo(np.float64).eps / 2
    k = W.shape[1] + r + 2
    two_gamma = 2 * k * u / (1 - k * u)
    assert f"{two_gamma:.1e}" == "1.3e-13" and "2\\gamma_{586} = 1.3 \\times 10^{-13}" in _section("12")
    M = np.abs(x) @ (np.abs(W) + s * np.abs(B) @ np.abs(A)).T
    diff = np.abs(x @ (W + s * B @ A).T - lora_forward(x, W, A, B, s))
    assert np.all(diff <= two_gamma * M), "the merge bound of §12.4 fails"
    assert np.all(100 * diff <= two_gamma * M), "§12.4 says the bound is more than 100 times the difference"
    assert diff.max() < 1e-13, diff.max()
    w32 = (W + s * B @ A).astype(np.float32).astype(np.float64)
    d32 = np.abs(x @ w32.T - x @ (W + s * B @ A).T)
    assert np.all(d32 <= (np.finfo(np.float32).eps / 2 + two_gamma) * M), "float32 storage of the merge: 2^-24 M"


def test_rms_norm_gradient_is_orthogonal_to_x_without_eps():
    """§12.3: x . dx = r (g . x) eps / (mean(x^2) + eps), zero at eps = 0."""
    from transformer_course.llama import rms_norm_backward

    rng = np.random.default_rng(0)
    x, w = rng.normal(2, 1, (4, 576)), rng.uniform(0.5, 2, 576)
    G = rng.normal(0, 1, x.shape)
    for eps in (1e-5, 0.0):
        dx, _ = rms_norm_backward(G, x, w, eps)
        ms = np.mean(x**2, -1)
        predicted = np.sum(G * w * x, -1) * eps / (ms + eps) / np.sqrt(ms + eps)
        np.testing.assert_allclose(np.sum(dx * x, -1), predicted, rtol=1e-6, atol=1e-12)


def test_silu_derivative_extremes():
    """§12.3: silu'(0) = 1/2, max 1.0998 near 2.3994, min -0.0998 near -2.3994, negative below -1.278."""
    from transformer_course.llama import silu_backward

    z = np.linspace(-6, 6, 1_200_001)
    d = silu_backward(np.ones_like(z), z)
    assert silu_backward(np.ones(1), np.zeros(1))[0] == 0.5
    assert (round(d.max(), 4), round(z[d.argmax()], 4)) == (1.0998, 2.3994)
    assert (round(d.min(), 4), round(z[d.argmin()], 4)) == (-0.0998, -2.3994)
    assert round(z[np.flatnonzero(d < 0).max()], 3) == -1.278
