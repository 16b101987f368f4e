"""Answers ``lg.status.steady`` and keeps a grandchild process running."""

import asyncio
import sys

from fakes.child import serve

if __name__ == "__main__":
    sys.exit(asyncio.run(serve("steady", grandchild=True)))
