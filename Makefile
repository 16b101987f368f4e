# Lockgate: `make run` starts everything on this machine; `make test` runs every suite.
# Both need python3 (>= 3.11) and make: the first target that needs it builds .venv. `make test`
# also needs what `prerequisites` checks (and, as root with apt-get, installs).

PY ?= python3
VENV = .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

# Only suites that exist: git keeps no empty directories, and pytest fails on a missing path.
TEST_DIRS = $(wildcard tests/unit tests/integration tests/e2e)

.PHONY: install run cluster docs test test-adk test-crewai test-agentdojo test-ts test-unit test-cluster bench bench-cluster bench-all lint clean prerequisites bubblewrap node

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
		echo "Lockgate needs Python >= 3.11; try: make PY=python3.11 $(MAKECMDGOALS)" >&2; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

run: $(STAMP) bubblewrap
	$(BIN)/lockgate run

# The scale-out profile on this machine, no Docker: three nats-server nodes as one JetStream
# cluster (R3, sync_interval: always), two replicas of every service and adapter, the views
# on PostgreSQL; everything under var/cluster/. The README's "Running it at scale" says more.
cluster: $(STAMP)
	$(BIN)/lockgate run --cluster 3

# TypeScript: Node >= 20 and npm, which the machines have (`node` checks). Each Node project
# installs from its committed lockfile with `npm ci`, into its own node_modules, no global tools.
NPM_CI = npm ci --no-audit --no-fund --loglevel=error
TS_DIR = libs/lockgate-ts
TS_STAMP = $(TS_DIR)/node_modules/.installed
# The MCP clients nobody here wrote (the Inspector CLI, the TypeScript SDK's client), which
# tests/e2e/test_mcp_interop.py drives against the front door.
INTEROP_DIR = tests/mcp-interop
INTEROP_STAMP = $(INTEROP_DIR)/node_modules/.installed

# Two workers, each taking whole test modules (a module's system starts once): the suites
# spend most of their time waiting on processes and timers, so two at once on two cores
# take about 10 minutes where one after the other took 17.
test: $(STAMP) prerequisites $(INTEROP_STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile $(TEST_DIRS) $(OWN_ENVIRONMENTS:%=--ignore=%)
	$(MAKE) --no-print-directory test-ts
	$(MAKE) --no-print-directory test-adk
	$(MAKE) --no-print-directory test-crewai
	$(MAKE) --no-print-directory test-agentdojo

node:
	@command -v node >/dev/null && command -v npm >/dev/null \
	|| { echo "the TypeScript client and the MCP interop tests need Node >= 20 and npm" >&2; exit 1; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
	|| { echo "Node >= 20 is needed; this is $$(node --version)" >&2; exit 1; }

$(TS_STAMP): $(TS_DIR)/package-lock.json | node
	cd $(TS_DIR) && $(NPM_CI)
	touch $@

$(INTEROP_STAMP): $(INTEROP_DIR)/package-lock.json | node
	cd $(INTEROP_DIR) && $(NPM_CI)
	touch $@

# The TypeScript client and its Vercel AI SDK integration, built from schemas/ and tested with
# Node's own test runner against a real system (which each test file starts through .venv).
test-ts: $(STAMP) $(TS_STAMP)
	cd $(TS_DIR) && LOCKGATE_PYTHON=$(abspath $(BIN)/python) npm test

# Tests that run in an environment of their own (below), not in the dev one.
OWN_ENVIRONMENTS = tests/e2e/test_integration_google_adk.py tests/e2e/test_integration_crewai.py

# Google's Agent Development Kit pins google-genai below 3 and OpenTelemetry below the dev
# tools' versions, so its integration is checked and tested in an environment of its own:
# Lockgate, the kit and the test runner, nothing else (`make test` runs it).
ADK_VENV = .venv-adk
ADK_STAMP = $(ADK_VENV)/.installed
ADK_FILES = libs/lockgate/integrations/google_adk.py tests/e2e/test_integration_google_adk.py

$(ADK_STAMP): pyproject.toml
	$(PY) -m venv $(ADK_VENV)
	$(ADK_VENV)/bin/python -m pip install --upgrade pip
	$(ADK_VENV)/bin/python -m pip install -e ".[google-adk]" "pytest>=8" "pytest-asyncio>=0.24" "mypy>=1.10"
	touch $@

test-adk: $(ADK_STAMP) prerequisites
	cd libs && ../$(ADK_VENV)/bin/mypy --strict --config-file ../pyproject.toml lockgate/integrations/google_adk.py
	$(ADK_VENV)/bin/pytest -q tests/e2e/test_integration_google_adk.py

# CrewAI requires mcp < 2, openai < 3 and pydantic < 2.13, which Lockgate's MCP extra and the
# dev tools are past: the same arrangement, an environment of its own without the MCP extra.
CREWAI_VENV = .venv-crewai
CREWAI_STAMP = $(CREWAI_VENV)/.installed
# CrewAI reports telemetry and traces by default: its tests send nothing anywhere.
CREWAI_OFFLINE = CREWAI_DISABLE_TELEMETRY=true OTEL_SDK_DISABLED=true CREWAI_TRACING_ENABLED=false

$(CREWAI_STAMP): pyproject.toml
	$(PY) -m venv $(CREWAI_VENV)
	$(CREWAI_VENV)/bin/python -m pip install --upgrade pip
	$(CREWAI_VENV)/bin/python -m pip install -e ".[crewai]" "pytest>=8" "pytest-asyncio>=0.24" "mypy>=1.10"
	touch $@

test-crewai: $(CREWAI_STAMP) prerequisites
	cd libs && ../$(CREWAI_VENV)/bin/mypy --strict --config-file ../pyproject.toml lockgate/integrations/crewai.py
	$(CREWAI_OFFLINE) $(CREWAI_VENV)/bin/pytest -q tests/e2e/test_integration_crewai.py

# AgentDojo's banking suite, its ground truth benign and hijacked by every injection, through a
# private system with the demo policy bundle: the figures, and where containment cost utility
# (docs/evaluation.md says what each means). Its tests run with the others; this is the figures,
# and it fails when the demo bundle misses a goal: an attack through, a task the reviewer could
# not keep, more than one review per benign task.
test-agentdojo: $(STAMP)
	$(BIN)/lockgate eval --agentdojo banking --goals

# Debian packages `make test` needs beyond Python: PostgreSQL's server binaries (initdb and
# pg_ctl, on PATH or under /usr/lib/postgresql/<version>/bin, as lockgate.operations.postgres
# looks for them: the views' tests and the cluster harness start throwaway servers), chromium
# (the console's browser test; Playwright's own browser download is not used) and bubblewrap
# (the repository world's test sandbox). As root with apt-get, what is missing is installed;
# otherwise one line says what is missing and stops. Then bwrap must be able to make user
# namespaces, which no package provides. Silent when everything is there.
# Where the tests look for chromium and PostgreSQL beside PATH (tests/unit/test_prerequisites.py
# points them elsewhere).
CHROMIUM_BIN = /usr/bin/chromium
POSTGRES_LIB = /usr/lib/postgresql
APT_INSTALL = DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends

prerequisites:
	@missing=""; \
	for tool in initdb pg_ctl; do \
		command -v $$tool >/dev/null || ls $(POSTGRES_LIB)/*/bin/$$tool >/dev/null 2>&1 \
		|| { missing="$$missing postgresql"; break; }; \
	done; \
	[ -x $(CHROMIUM_BIN) ] || command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing for the tests"; \
			$(APT_INSTALL)$$missing >/dev/null 2>&1 \
			|| { apt-get update -qq && $(APT_INSTALL)$$missing >/dev/null; } \
			|| { echo "make test: could not install$$missing (apt-get install$$missing failed)" >&2; exit 1; }; \
		else \
			echo "make test is missing Debian packages:$$missing (as root: apt-get install$$missing; make test run as root installs them)" >&2; \
			exit 1; \
		fi; \
	fi; \
	bwrap --unshare-all --unshare-user --ro-bind / / true 2>/dev/null || { \
		echo "make test needs user namespaces for the test sandbox, and bwrap --unshare-all --unshare-user cannot make them here (enable unprivileged user namespaces, or run in a container allowed to make them)" >&2; \
		exit 1; }

# `make run`'s repository world runs repo.run_tests in a bubblewrap sandbox: as root with
# apt-get a missing bwrap is installed; otherwise a warning, and that one capability is refused.
bubblewrap:
	@command -v bwrap >/dev/null \
	|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo "installing bubblewrap for repo.run_tests" \
		&& { $(APT_INSTALL) bubblewrap >/dev/null 2>&1 || { apt-get update -qq && $(APT_INSTALL) bubblewrap >/dev/null; }; }; } \
	|| echo "*** WARNING: no bwrap (apt-get install bubblewrap): the demo's repo.run_tests will be refused ***" >&2

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Every fault test on the local cluster (three nodes, R3, three events partitions, two
# replicas of every process), then the seeded randomized test on it. CI runs it after
# `make test`; the README's "Running it at scale" says what each test does.
test-cluster: $(STAMP) prerequisites
	LOCKGATE_CLUSTER=1 LOCKGATE_CLUSTER_LONG=1 $(BIN)/pytest -q tests/e2e/test_cluster_profile.py tests/e2e/test_cluster_restart.py tests/e2e/test_cluster_faults.py
	LOCKGATE_CHAOS_CLUSTER=1 $(BIN)/pytest -q tests/e2e/test_randomized.py

# BASELINE=<rev>: also measure the build of that git revision beside this one, in the same run.
bench: $(STAMP)
	$(BIN)/python -m bench $(if $(BASELINE),--baseline $(BASELINE))

# The same comparison on the local cluster: three nodes at R1 with three events partitions,
# then at R3 with sync_interval: always; Lockgate beside the raw chain on each (a few minutes).
bench-cluster: $(STAMP)
	$(BIN)/python -m bench --profile cluster

# Every profile in one run: the single server's whole benchmark, then both cluster profiles.
bench-all: $(STAMP)
	$(BIN)/python -m bench --profile all

# The documentation site, from docs/ (mkdocs.yml): every page, link and anchor must resolve.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# ruff, mypy --strict, and the layering contract (.importlinter; docs/design.md says how to read it).
lint: $(STAMP)
	$(BIN)/ruff check libs services tests bench
	$(BIN)/mypy --strict libs services bench
	$(BIN)/lint-imports --no-cache .importlinter

clean:
	rm -rf var
