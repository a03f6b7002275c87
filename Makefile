# Two commands set everything up on a fresh machine with Python 3.11+:
#   make book   build the HTML book into _build/html (executes every chapter)
#   make test   unit tests + every notebook under nbval + ruff
#   make test-book   the built book in headless Chromium (every page; after `make book`)
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip on some machines warns about every package of a missing local index; keep the log readable
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true

.PHONY: book test test-book lint student lab clean benchmarks
# Scripts the book serves from its own files (no CDN): Vega for the live figures (Vega-Lite the
# version the installed Altair writes) and MathJax 3, fetched from npm at build time.
VENDOR := _build/vendor
VENDOR_STAMP := $(VENDOR)/.vendored
CHROMIUM ?= $(shell command -v chromium || command -v chromium-browser || command -v google-chrome || echo /usr/bin/chromium)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tpviz needs Python 3.11 or newer (JAX 0.10 does); set PYTHON=python3.12, for example.")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing the pinned requirements into $(VENV) (only when requirements.txt changes)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e . 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -c "import tpviz, jax, jupyter_book, nbval"
	@touch $@

$(VENDOR_STAMP): $(STAMP) Makefile
	@command -v npm >/dev/null || { echo "make book needs npm (apt-get install npm)"; exit 1; }
	@mkdir -p $(VENDOR)/npm $(VENDOR)/vega
	npm install --silent --no-audit --no-fund --prefix $(VENDOR)/npm vega@6 vega-embed@7 \
	  mathjax@3 vega-lite@$$($(BIN)/python -c "import altair; print(altair.SCHEMA_VERSION[1:])")
	cp $(VENDOR)/npm/node_modules/vega/build/vega.min.js $(VENDOR)/npm/node_modules/vega-lite/build/vega-lite.min.js $(VENDOR)/npm/node_modules/vega-embed/build/vega-embed.min.js $(VENDOR)/vega/
	rm -rf $(VENDOR)/mathjax && cp -r $(VENDOR)/npm/node_modules/mathjax/es5 $(VENDOR)/mathjax
	@touch $@

book: $(STAMP) $(VENDOR_STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: $(STAMP)
	$(BIN)/python -m pytest tests book --nbval-lax -n 2 --dist loadfile -p no:cacheprovider \
	  --ignore=tests/browser
	$(BIN)/ruff check .

# Headless Debian Chromium driven by Playwright (pip `playwright` brings its driver; it never
# downloads a browser): installed here when missing.
test-book: $(STAMP)
	@test -f _build/html/index.html || { echo "run make book first"; exit 1; }
	@test -x "$(CHROMIUM)" || { echo "Installing Chromium (apt-get)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	TPVIZ_CHROMIUM=$$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
	  $(BIN)/python -m pytest tests/browser -p no:cacheprovider -q

lint: $(STAMP)
	$(BIN)/ruff check .

student: $(STAMP)
	$(BIN)/python -m tpviz.grading.student book _build/student

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/budgets.py

lab: $(STAMP)
	$(BIN)/python -m pip install --quiet jupyterlab 2>&1 | $(QUIET_PIP)
	$(BIN)/jupyter lab book

clean:
	rm -rf _build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
