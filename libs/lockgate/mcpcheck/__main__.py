"""``python -m lockgate.mcpcheck``: the conformance suite from the command line."""

import sys

from lockgate.mcpcheck.cli import main

if __name__ == "__main__":
    sys.exit(main())
