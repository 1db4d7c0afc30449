# The reader-facing website: the executed course (solutions/*/*.ipynb with their stored outputs,
# solutions/theory.md, site/intro.md, site/about.md) as a Jupyter Book 1 book, built fully
# offline, its maths typeset at build time with Node.js (the machine's node and npm). The book
# is site/ (_config.yml, _toc.yml); site/solutions links to ../solutions.
# Included by the top-level Makefile, which defines PY, BIN and `env`.
#
#   make site           build it into site/_build/html when an input changed (nothing is executed)
#   make serve          serve it on http://127.0.0.1:$(SITE_PORT)/ (builds only when stale)
#   make browser-deps   apt-get install chromium (for tests/test_site_browser.py)

SITE_HTML := site/_build/html
SITE_HOST := 127.0.0.1
SITE_PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
MATHJAX := site/_build/mathjax/mathjax/tex-mml-chtml.js
SITE_INPUTS := $(wildcard site/*.yml site/*.md site/*.py site/*.cjs site/site_assets/*.* solutions/*.md solutions/*/*.ipynb solutions/*/*.png) README.md mk/site.mk
# mathjax-full (npm, pinned by site/package-lock.json) typesets the maths at build time.
SITE_NODE := site/node_modules/.package-lock.json

.PHONY: site serve browser-deps

site: $(SITE_HTML)/index.html ## build the website into site/_build/html (offline, nothing executed)

# Runs only when an input changed; then --all rebuilds every page (Sphinx alone would not
# refresh a changed stylesheet). -W: a warning (a dead link, a missing page) fails the build.
# Then every formula is typeset once, here, instead of in each reader's browser
# (site/prerender_math.cjs; a formula MathJax cannot typeset fails the build).
$(SITE_HTML)/index.html: $(SITE_INPUTS) $(MATHJAX) $(SITE_NODE) | env
	$(BIN)/jupyter-book build site --path-output site --all --warningiserror --keep-going --quiet
	node site/prerender_math.cjs $(SITE_HTML)
	@touch $@

$(SITE_NODE): site/package.json site/package-lock.json
	cd site && npm ci --no-audit --no-fund --loglevel=error

# Code, not configuration, because Sphinx serves only files inside the book: MathJax 3 (offline)
# is copied there (site/_build/mathjax, a static folder of _config.yml) from the
# django-static-mathjax package that requirements/lock.txt installs.
$(MATHJAX): | env
	rm -rf $(@D) && mkdir -p $(dir $(@D))
	cp -r "$$($(PY) -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__file__).parent / "static/mathjax/es5")')" $(@D)

serve: site ## serve the website on 127.0.0.1 and print its address
	@echo "Serving the course website at http://$(SITE_HOST):$(SITE_PORT)/ (Ctrl+C to stop)"
	$(PY) -m http.server $(SITE_PORT) --bind $(SITE_HOST) --directory $(SITE_HTML)

browser-deps: ## apt-get install chromium (for the browser test) when it is missing
	@if [ -x "$(CHROMIUM)" ]; then \
		echo "browser-deps: $(CHROMIUM) is installed"; \
	else \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium; \
	fi
