"""``python -m lockgate.worlds.mcpservers {p|q} (--stdio | --http --port N) --state DIR``."""

import sys

from lockgate.worlds.mcpservers.run import main

if __name__ == "__main__":
    sys.exit(main())
