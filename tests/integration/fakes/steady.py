"""Answers ``lg.status.steady`` and keeps a grandchild process running."""

import sys

from fakes.child import run

if __name__ == "__main__":
    sys.exit(run("steady", grandchild=True))
