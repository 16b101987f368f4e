# Lockgate: `make run` starts everything on this machine; `make test` runs every suite.
# Needs only python3 (>= 3.11) and make: the first target that needs it builds .venv.

PY ?= python3
VENV = .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

# Only suites that exist: git keeps no empty directories, and pytest fails on a missing path.
TEST_DIRS = $(wildcard tests/unit tests/integration tests/e2e)

.PHONY: install run test test-unit bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "Lockgate needs Python >= 3.11; try: make PY=python3.11 $(MAKECMDGOALS)" >&2; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

run: $(STAMP)
	$(BIN)/lockgate run

test: $(STAMP)
	$(BIN)/pytest -q $(TEST_DIRS)

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check libs services tests bench
	$(BIN)/mypy --strict libs services bench

clean:
	rm -rf var
