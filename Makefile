# Lockgate: `make run` starts everything on this machine; `make test` runs every suite.
# Needs only python3 (>= 3.11) and make: the first target that needs it builds .venv.

PY ?= python3
VENV = .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

# Only suites that exist: git keeps no empty directories, and pytest fails on a missing path.
TEST_DIRS = $(wildcard tests/unit tests/integration tests/e2e)

.PHONY: install run cluster test test-unit test-cluster bench bench-cluster bench-all lint clean chromium

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

# The scale-out profile on this machine, no Docker: three nats-server nodes as one JetStream
# cluster (R3, sync_interval: always), two replicas of every service and adapter, the views
# on PostgreSQL; everything under var/cluster/. The README's "Running it at scale" says more.
cluster: $(STAMP)
	$(BIN)/lockgate run --cluster 3

# Two workers, each taking whole test modules (a module's system starts once): the suites
# spend most of their time waiting on processes and timers, so two at once on two cores
# take about 10 minutes where one after the other took 17.
test: $(STAMP) chromium
	$(BIN)/pytest -q -n 2 --dist loadfile $(TEST_DIRS)

# The console's browser test drives Debian's chromium (Playwright's own browser download is
# not used). As root, a missing one is installed; otherwise say so loudly: the test skips
# (and fails under CI=true).
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium for the console's browser test"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; } \
		|| echo "*** WARNING: could not install chromium: the console's browser test will not run ***" >&2; \
	else \
		echo "*** WARNING: no /usr/bin/chromium (install it: apt-get install chromium): the console's browser test will not run ***" >&2; \
	fi

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Every fault test on the local cluster (three nodes, R3, three events partitions, two
# replicas of every process), then the seeded randomized test on it. CI runs it after
# `make test`; the README's "Running it at scale" says what each test does.
test-cluster: $(STAMP)
	LOCKGATE_CLUSTER=1 LOCKGATE_CLUSTER_LONG=1 $(BIN)/pytest -q tests/e2e/test_cluster_profile.py tests/e2e/test_cluster_faults.py
	LOCKGATE_CHAOS_CLUSTER=1 $(BIN)/pytest -q tests/e2e/test_randomized.py

bench: $(STAMP)
	$(BIN)/python -m bench

# The same comparison on the local cluster: three nodes at R1 with three events partitions,
# then at R3 with sync_interval: always; Lockgate beside the raw chain on each (a few minutes).
bench-cluster: $(STAMP)
	$(BIN)/python -m bench --profile cluster

# Every profile in one run: the single server's whole benchmark, then both cluster profiles.
bench-all: $(STAMP)
	$(BIN)/python -m bench --profile all

lint: $(STAMP)
	$(BIN)/ruff check libs services tests bench
	$(BIN)/mypy --strict libs services bench

clean:
	rm -rf var
