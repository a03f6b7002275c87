# Two commands set everything up on a fresh machine with Python 3.11+:
#   make book   build the HTML book into _build/html (executes every chapter)
#   make test   unit tests + every notebook under nbval + ruff
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INSTRUCTOR := $(VENV)/.instructor  # the instructor extra (nbgrader) is installed
# pip on some machines warns about every package of a missing local index; keep the log readable
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true

.PHONY: book test lint student grade lab clean benchmarks

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tpviz needs Python 3.11 or newer (JAX 0.10 does); set PYTHON=python3.12, for example.")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing the pinned requirements into $(VENV) (only when requirements.txt changes)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e . 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -c "import tpviz, jax, jupyter_book, nbval"
	@touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: $(STAMP) $(INSTRUCTOR)
	$(BIN)/python -m pytest tests book --nbval-lax -n 2 --dist loadfile -p no:cacheprovider
	$(BIN)/ruff check .

lint: $(STAMP)
	$(BIN)/ruff check .

# For instructors (the `instructor` extra: nbgrader). Student copies and grades live outside
# _build/, so `make clean` keeps them; neither command overwrites a file changed since it wrote it.
$(INSTRUCTOR): $(STAMP) pyproject.toml
	@echo "Installing the instructor extra (nbgrader) into $(VENV)..."
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[instructor]" 2>&1 | $(QUIET_PIP)
	@touch $@

student: $(INSTRUCTOR)
	$(BIN)/python -m tpviz.grading.student book student

grade: $(INSTRUCTOR)
	$(BIN)/python -m tpviz.grading.grade submissions grades

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/budgets.py

lab: $(STAMP)
	$(BIN)/python -m pip install --quiet jupyterlab 2>&1 | $(QUIET_PIP)
	$(BIN)/jupyter lab book

clean:
	rm -rf _build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
