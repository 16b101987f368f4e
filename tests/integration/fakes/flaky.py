"""Answers ``lg.status.flaky``; the first time it runs it exits with 3 after one second."""

import asyncio
import sys

from fakes.child import serve

if __name__ == "__main__":
    sys.exit(asyncio.run(serve("flaky", crash_once_after_s=1.0)))
