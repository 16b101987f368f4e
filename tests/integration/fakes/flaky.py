"""Answers ``lg.status.flaky``; the first time it runs it exits with 3 after one second."""

import sys

from fakes.child import run

if __name__ == "__main__":
    sys.exit(run("flaky", crash_once_after_s=1.0))
