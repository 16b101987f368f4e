"""The ``lockgate`` command moved to :mod:`lockgate.cli`; this name runs it until the entry point says so."""

import sys

from lockgate.cli.app import main
from lockgate.cli.where import Where

__all__ = ["Where", "main"]

if __name__ == "__main__":
    sys.exit(main())
