# The reader-facing website: the executed course (solutions/*/*.ipynb with
# their stored outputs, theory.md, the landing page site/intro.md) built with
# Jupyter Book 1.x, fully offline, MathJax served from the site itself.
# Included by the top-level Makefile, which defines PY, BIN and `env`.
#
#   make site           build it into site/_build/html (nothing is executed)
#   make serve          serve it on http://127.0.0.1:$(SITE_PORT)/
#   make browser-deps   apt-get install chromium (for tests/test_site_browser.py)

SITE_HTML := site/_build/html
SITE_HOST := 127.0.0.1
SITE_PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: site serve browser-deps

# The site's packages (Jupyter Book 1, MathJax) are in requirements/lock.txt, installed by `env`.
site: env ## build the website into site/_build/html (offline, nothing executed)
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
