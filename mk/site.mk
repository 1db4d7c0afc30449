# The reader-facing website: the executed course (solutions/*/*.ipynb with
# their stored outputs, theory.md, the landing page site/intro.md) built with
# Jupyter Book 1.x, fully offline, MathJax served from the site itself.
# Included by the top-level Makefile, which defines PY, BIN and `env`.
#
#   make site           build it into site/_build/html (nothing is executed)
#   make serve          serve it on http://127.0.0.1:$(SITE_PORT)/
#   make site-deps      pip-install requirements/site.txt into the venv
#   make browser-deps   apt-get install chromium (for tests/test_site_browser.py)

SITE_REQUIREMENTS := requirements/site.txt
SITE_HTML := site/_build/html
SITE_HOST := 127.0.0.1
SITE_PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium
SITE_DEPS_STAMP := .venv/.site-deps.stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: site serve site-deps browser-deps

SITE_PIP := $(PY) -m pip --disable-pip-version-check install --quiet

# Re-installs when requirements/site.txt changes, the venv is new, or the
# top-level install stamps are newer (a lock re-install may have moved a pin).
$(SITE_DEPS_STAMP): $(SITE_REQUIREMENTS) $(wildcard .venv/.core-installed .venv/.test-installed) | env
	$(SITE_PIP) -r $(SITE_REQUIREMENTS)
	@touch $@

site-deps: env ## pip-install the website's packages (requirements/site.txt) into .venv
	$(SITE_PIP) -r $(SITE_REQUIREMENTS)
	@touch $(SITE_DEPS_STAMP)

# The browser test (tests/test_site_browser.py) builds the site when it is
# stale, so `make test` needs the site's packages too: without them it would
# skip instead of testing.
test-env: $(SITE_DEPS_STAMP)

site: env $(SITE_DEPS_STAMP) ## build the website into site/_build/html (offline, nothing executed)
	$(PY) site/build.py

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
