// Typeset the website's maths once, at build time (`make site` runs this after Jupyter Book).
//
//   node site/prerender_math.cjs site/_build/html
//
// Why: MathJax typesetting in the reader's browser was the heavy part of the long pages. The theory
// page (969 formulas) took 8-10 s of Chromium CPU, 12-21 s before its maths showed at load ~15 on
// 2 cores (raw TeX until then, then the page reflowed); typeset here, the browser only lays out HTML
// and CSS (see site/README.md for the measurements). The output is MathJax's own CommonHTML, with
// the same TeX packages and options the page asked MathJax for, so it looks as before.
//
// What it does to every page with maths (Sphinx writes each formula as
// <span|div class="math notranslate nohighlight">\(...\)|\[...\]</span|div>):
//   * each formula becomes an <mjx-container> inside that same element (plus its MathML, hidden,
//     for screen readers and copying: MathJax's assistive-mml, as the browser version adds it);
//   * the page's two MathJax <script> tags (its configuration and tex-mml-chtml.js) are replaced by
//     the CommonHTML stylesheet of the characters the page uses; its fonts are the woff files of the
//     site's own MathJax copy (_static/mathjax, the same version: checked).
// A TeX error (an undefined macro: `noundefined` is off, as in _config.yml) fails the build, naming
// the page and the formula, instead of showing a red macro to a reader.

"use strict";

const fs = require("fs");
const path = require("path");
const {mathjax} = require("mathjax-full/js/mathjax.js");
const {TeX} = require("mathjax-full/js/input/tex.js");
const {CHTML} = require("mathjax-full/js/output/chtml.js");
const {liteAdaptor} = require("mathjax-full/js/adaptors/liteAdaptor.js");
const {RegisterHTMLHandler} = require("mathjax-full/js/handlers/html.js");
const {AssistiveMmlHandler} = require("mathjax-full/js/a11y/assistive-mml.js");
const {VERSION} = require("mathjax-full/js/components/version.js");
require("mathjax-full/js/input/tex/AllPackages.js");

// The packages of MathJax's tex-mml-chtml component (base, ams, newcommand, noundefined, configmacros)
// and every package its `autoload` would load on first use (`require` and `autoload` themselves are
// not needed: nothing is loaded lazily here). The page's own MathJax configuration (_config.yml's
// mathjax3_config, which removes `noundefined`) is applied to this list.
const PACKAGES = ["base", "ams", "newcommand", "noundefined", "configmacros", "action", "amscd", "bbox", "boldsymbol",
  "braket", "bussproofs", "cancel", "cases", "centernot", "color", "colortbl", "empheq", "enclose", "extpfeil",
  "gensymb", "html", "mathtools", "mhchem", "upgreek", "unicode", "verb"];
// The theme's text is 16 px with an x-height that Chromium measures as 9 px; MathJax in the browser
// matches its own font's x-height (0.442 em) to it, which scaled every formula by 127.3 %: the same here.
const METRICS = {em: 16, ex: 9, containerWidth: 80 * 16, scale: 9 / (0.442 * 16)};
const MATH = /(<(span|div) class="math notranslate nohighlight"[^>]*>)([\s\S]*?)(<\/\2>)/g;
const SCRIPTS = /\s*<script>window\.MathJax = ([^<]*)<\/script>\s*<script[^>]*tex-mml-chtml\.js[^>]*><\/script>/;
const FONTS = "_static/mathjax/output/chtml/fonts/woff-v2";

const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));

function unescapeHtml(text) {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'")
    .replace(/&amp;/g, "&");
}

function tex(body) {
  const text = unescapeHtml(body).trim();
  const delimited = text.match(/^\\\(([\s\S]*)\\\)$/) || text.match(/^\\\[([\s\S]*)\\\]$/);
  return delimited ? delimited[1] : text;       // amsmath environments come without \[ \]
}

// The TeX packages the page's configuration asks for: {"tex": {"packages": {"[-]": [...], "[+]": [...]}}}.
function packages(config, file) {
  const known = new Set(["tex", "options"]);
  const unknown = Object.keys(config).filter((key) => !known.has(key));
  const tex = config.tex || {};
  const asked = tex.packages || {};
  if (unknown.length || Object.keys(tex).some((key) => key !== "packages") || Array.isArray(asked) ||
      Object.keys(asked).some((key) => key !== "[-]" && key !== "[+]")) {
    throw new Error(`${file}: MathJax configuration this step does not apply: ${JSON.stringify(config)}`);
  }
  const removed = new Set(asked["[-]"] || []);
  return PACKAGES.filter((name) => !removed.has(name)).concat(asked["[+]"] || []);
}

function prerender(file, root) {
  const html = fs.readFileSync(file, "utf8");
  if (!html.match(MATH)) {
    if (/tex-mml-chtml\.js/.test(html)) throw new Error(`${file}: no maths, yet Sphinx gave it MathJax`);
    return 0;
  }
  const scripts = html.match(SCRIPTS);
  if (!scripts) throw new Error(`${file}: has maths but not the MathJax <script> tags this step replaces`);
  const texPackages = packages(JSON.parse(scripts[1]), file);
  const fonts = path.relative(path.dirname(file), path.join(root, FONTS)).split(path.sep).join("/");
  const doc = mathjax.document("", {InputJax: new TeX({packages: texPackages}), OutputJax: new CHTML({fontURL: fonts})});
  const errors = [];
  let count = 0;
  const typeset = html.replace(MATH, (whole, open, tag, body, close) => {
    const source = tex(body);
    const out = adaptor.outerHTML(doc.convert(source, {display: tag === "div", ...METRICS}));
    if (/<mjx-merror|data-mjx-error/.test(out)) errors.push(source);
    count += 1;
    return open + out + close;
  });
  if (errors.length) {
    throw new Error(`${file}: ${errors.length} formula(s) MathJax cannot typeset:\n  ` + errors.slice(0, 5).join("\n  "));
  }
  // MathJax in the browser would also have typeset TeX in notebook outputs (`options.processHtmlClass`):
  // there is none on these pages, and if some appears this step must learn to typeset it.
  const rest = typeset.replace(/<(script|style|pre|code|mjx-container)\b[\s\S]*?<\/\1>/g, "");
  const stray = rest.match(/.{0,40}(\\\(|\\\[|\$\$).{0,40}/);
  if (stray) throw new Error(`${file}: TeX outside Sphinx's maths, which this step does not typeset: ${stray[0]}`);
  const styles = adaptor.outerHTML(doc.outputJax.styleSheet(doc));
  fs.writeFileSync(file, typeset.replace(SCRIPTS, "\n    " + styles));
  return count;
}

function htmlFiles(dir, found = []) {
  for (const entry of fs.readdirSync(dir, {withFileTypes: true})) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== "_static" && entry.name !== "_sources" && entry.name !== "_images") htmlFiles(full, found);
    } else if (entry.name.endsWith(".html")) {
      found.push(full);
    }
  }
  return found;
}

function main() {
  const root = process.argv[2];
  if (!root) throw new Error("usage: node site/prerender_math.cjs site/_build/html");
  const runtime = fs.readFileSync(path.join(root, "_static/mathjax/tex-mml-chtml.js"), "utf8");
  if (!runtime.includes(`.VERSION="${VERSION}"`)) {
    throw new Error(`the site's MathJax copy is not version ${VERSION} (mathjax-full): its fonts would not match`);
  }
  if (!fs.existsSync(path.join(root, FONTS, "MathJax_Main-Regular.woff"))) throw new Error(`no MathJax fonts in ${FONTS}`);
  const t0 = Date.now();
  let formulas = 0, pages = 0;
  for (const file of htmlFiles(root)) {
    const n = prerender(file, root);
    formulas += n;
    pages += n > 0;
  }
  console.log(`prerender_math: ${formulas} formulas typeset on ${pages} pages (MathJax ${VERSION}, CommonHTML) ` +
              `in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

main();
