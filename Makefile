# Two commands set everything up on a fresh machine with Python 3.11+:
#   make book   build the HTML book into _build/html (executes every chapter)
#   make test   unit tests + every chapter + ruff (pinned requirements.txt, .venv)
# Two more test the ends of the supported range (DESIGN.md, "Where it runs"), on Python 3.13,
# every chapter under nbval and the unit tests marked neither slow (tests that start worker
# processes or repeat at more settings what the chapters' cells check) nor logic (the library's
# own logic above the version-sensitive layers, conftest.py's LOGIC_FILES): make test runs those.
# Unit tests compile at XLA's optimisation level 0; the chapters at the default (conftest.py):
#   make test-colab    Colab's versions (requirements-colab.txt, .venv-colab): JAX 0.7.2,
#                      ipywidgets 7.7.1, ...; tpviz installed with a plain `pip install .`,
#                      checked to install tpviz alone
#   make test-newest   the newest JAX, NumPy, ipywidgets, matplotlib (requirements-newest.txt,
#                      .venv-newest; torch left out, its tests skip saying so)
# Each environment is rebuilt only when its requirements file changes (a stamp file in it).
#   make test-book   the built book in headless Chromium (every page; after `make book`)
#   make test-lab    the kernel front end: JupyterLab in headless Chromium (tests/browser/lab)
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INSTRUCTOR := $(VENV)/.instructor  # the instructor extra (nbgrader) is installed
# pip on some machines warns about every package of a missing local index; keep the log readable
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true

# Python 3.13 for the colab and newest environments: pyenv's newest 3.13, else python3.13
PYTHON313 ?= $(or $(shell ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.13.*/bin/python \
	2>/dev/null | sort -V | tail -n 1),$(shell command -v python3.13 2>/dev/null),python3.13)
# the test run of every environment: unit tests and every chapter. The pinned one executes each
# chapter as one test into the book's execution cache (conftest.py, --chapters-into-cache), so
# that `make book` builds from those runs; the others run the chapters under nbval.
PYTEST := -m pytest tests book -n 2 --dist loadfile -p no:cacheprovider --ignore=tests/browser --durations=40
# every environment's install: uv when it can (same resolution as pip, faster), else pip
INSTALL := tools/install.py
# ipykernel 6 on Python 3.13 (colab) starts debugpy, which warns about frozen modules
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: book test test-book test-lab chromium test-colab test-newest test-all lint student grade lab clean clean-envs benchmarks
# Scripts the book serves from its own files (no CDN): Vega for the live figures (Vega-Lite the
# version the installed Altair writes) and MathJax 3, fetched from npm at build time.
VENDOR := _build/vendor
# npm's own tree stays outside the folder the site copies (only the built scripts are served)
NPM := _build/npm
VENDOR_STAMP := $(VENDOR)/.vendored
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser || command -v google-chrome || echo /usr/bin/chromium)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tpviz needs Python 3.11 or newer (JAX 0.10 does); set PYTHON=python3.12, for example.")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing the pinned requirements into $(VENV) (only when requirements.txt changes)..."
	@$(BIN)/python $(INSTALL) $(BIN)/python -r requirements.txt 2>&1 | $(QUIET_PIP)
	@$(BIN)/python $(INSTALL) $(BIN)/python --no-deps -e . 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -c "import tpviz, jax, jupyter_book, nbval"
	@touch $@

$(VENDOR_STAMP): $(STAMP) Makefile
	@command -v npm >/dev/null || { echo "make book needs npm (apt-get install npm)"; exit 1; }
	@mkdir -p $(NPM) $(VENDOR)/vega
	npm install --silent --no-audit --no-fund --prefix $(NPM) vega@6 vega-embed@7 \
	  mathjax@3 vega-lite@$$($(BIN)/python -c "import altair; print(altair.SCHEMA_VERSION[1:])")
	cp $(NPM)/node_modules/vega/build/vega.min.js $(NPM)/node_modules/vega-lite/build/vega-lite.min.js $(NPM)/node_modules/vega-embed/build/vega-embed.min.js $(VENDOR)/vega/
	rm -rf $(VENDOR)/mathjax && cp -r $(NPM)/node_modules/mathjax/es5 $(VENDOR)/mathjax
	@rm -rf $(VENDOR)/npm  # an older layout kept node_modules here, inside the site
	@touch $@

# The chapters are first executed two at a time into the build's own execution cache
# (jupyter-cache, keyed by each notebook's code; `make test` fills it too, and a chapter already
# there is not run again); the build then reads them from it. A chapter that failed there is
# executed again by the build, which reports its error. After changing the library but not a
# chapter, `make clean` first: the cache knows only the notebooks' code.
BOOK_CACHE := _build/.jupyter_cache
book: $(STAMP) $(VENDOR_STAMP)
	@mkdir -p _build
	@echo y | JUPYTERCACHE=$(BOOK_CACHE) $(BIN)/jcache notebook add book/[0-9]*.ipynb >/dev/null
	JUPYTERCACHE=$(BOOK_CACHE) $(BIN)/jcache project execute --executor local-parallel --timeout 180
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: $(STAMP) $(INSTRUCTOR)
	$(BIN)/ruff check .  # first: a lint error is found in seconds, not after the tests
	TPVIZ_ENV=pinned $(BIN)/python $(PYTEST) --chapters-into-cache

COLAB := .venv-colab
$(COLAB)/.installed: requirements-colab.txt
	@$(PYTHON313) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else "make test-colab needs Python 3.13 (Colab'"'"'s); set PYTHON313=/path/to/python3.13.")'
	@rm -rf $(COLAB) && $(PYTHON313) -m venv $(COLAB)
	@echo "Installing Colab's versions into $(COLAB) (only when requirements-colab.txt changes)..."
	@$(COLAB)/bin/python $(INSTALL) $(COLAB)/bin/python -r requirements-colab.txt 2>&1 | $(QUIET_PIP)
	@$(COLAB)/bin/python -c "import jax, ipywidgets, torch, nbval, xdist"
	@touch $@

# tpviz goes in with a plain `pip install .`, as the notebooks' first cell does it on Colab;
# .ci/install_alone.py fails unless that installed tpviz alone and kept Colab's JAX and ipywidgets
test-colab: $(COLAB)/.installed
	$(COLAB)/bin/python .ci/install_alone.py requirements-colab.txt
	TPVIZ_ENV=colab $(COLAB)/bin/python $(PYTEST) --nbval-lax -m "not slow and not logic"

NEWEST := .venv-newest
$(NEWEST)/.installed: requirements-newest.txt pyproject.toml
	@rm -rf $(NEWEST) && $(PYTHON313) -m venv $(NEWEST)
	@echo "Installing the newest releases into $(NEWEST) (only when requirements-newest.txt changes)..."
	@$(NEWEST)/bin/python $(INSTALL) $(NEWEST)/bin/python --upgrade -r requirements-newest.txt 2>&1 | $(QUIET_PIP)
	@$(NEWEST)/bin/python $(INSTALL) $(NEWEST)/bin/python -e . 2>&1 | $(QUIET_PIP)
	@$(NEWEST)/bin/python -c "import tpviz, jax, ipywidgets, nbval, xdist"
	@$(NEWEST)/bin/python -m pip freeze | grep -iE '^(jax|jaxlib|numpy|ipywidgets|matplotlib)=='
	@touch $@

test-newest: $(NEWEST)/.installed
	TPVIZ_ENV=newest $(NEWEST)/bin/python $(PYTEST) --nbval-lax -m "not slow and not logic"

test-all: test test-colab test-newest

# Headless Debian Chromium driven by Playwright (pip `playwright` brings its driver; it never
# downloads a browser): installed here when missing.
test-book: $(STAMP) chromium
	@test -f _build/html/index.html || { echo "run make book first"; exit 1; }
	TPVIZ_CHROMIUM=$$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
	  $(BIN)/python -m pytest tests/browser -p no:cacheprovider -q --ignore=tests/browser/lab

# The kernel front end: JupyterLab (pinned) in headless Chromium runs two small chapters and
# an explorer page, moves each explorer's controls and times the redraws, runs an exercise
# wrong and right, reopens a saved notebook without its kernel; a widget broken on purpose must
# be reported (tests/browser/lab/). Redraw times: _build/screenshots/lab/redraw_times.json.
test-lab: $(STAMP) chromium
	TPVIZ_CHROMIUM=$$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
	  $(BIN)/python -m pytest tests/browser/lab -p no:cacheprovider -q

chromium:
	@test -x "$(CHROMIUM)" || { echo "Installing Chromium (apt-get)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

lint: $(STAMP)
	$(BIN)/ruff check .

# For instructors (the `instructor` extra: nbgrader). Student copies and grades live outside
# _build/, so `make clean` keeps them; neither command overwrites a file changed since it wrote it.
$(INSTRUCTOR): $(STAMP) pyproject.toml
	@echo "Installing the instructor extra (nbgrader) into $(VENV)..."
	@$(BIN)/python $(INSTALL) $(BIN)/python -e ".[instructor]" 2>&1 | $(QUIET_PIP)
	@touch $@

student: $(INSTRUCTOR)
	$(BIN)/python -m tpviz.grading.release book student

grade: $(INSTRUCTOR)
	$(BIN)/python -m tpviz.grading.grade submissions grades

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/budgets.py

# JupyterLab (pinned in requirements.txt) on the student version of the chapters, in student/
# (no solutions; a copy you changed is kept as it is, the others are refreshed). JupyterLab
# saves widget state in the notebooks (tools/lab/overrides.json), so a notebook reopened after
# its kernel stopped still shows each explorer's last figure. The full chapters are in book/.
lab: $(INSTRUCTOR)
	$(BIN)/python -m tpviz.grading.release book student --keep-changed
	$(BIN)/jupyter lab --LabApp.app_settings_dir="$(CURDIR)/tools/lab" student

clean:
	rm -rf _build build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)*/*" -prune -exec rm -rf {} +

clean-envs:
	rm -rf $(VENV) $(COLAB) $(NEWEST)
