"""Answers ``lg.status.reconfigured`` until ``<var>/reconfigured.go`` appears, then exits with
``CONFIG_ERROR_EXIT`` (its configuration went bad while the run was up)."""

import sys

from fakes.child import run

if __name__ == "__main__":
    sys.exit(run("reconfigured", config_error_on="reconfigured.go"))
