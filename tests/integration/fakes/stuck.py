"""Answers ``lg.status.stuck``, saying one of its handlers has run for 999 seconds."""

import sys

from fakes.child import run

if __name__ == "__main__":
    sys.exit(run("stuck", stuck=True))
