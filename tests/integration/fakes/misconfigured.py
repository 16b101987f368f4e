"""Cannot run as configured: says why in one line and exits with ``CONFIG_ERROR_EXIT``, every time."""

import os
import sys
from pathlib import Path

from lockgate.runtime.entry import CONFIG_ERROR_EXIT

if __name__ == "__main__":
    with open(Path(os.environ["LOCKGATE_VAR_DIR"]) / "misconfigured.pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")
    print("misconfigured: LOCKGATE_WIDGETS is not a number", file=sys.stderr, flush=True)
    sys.exit(CONFIG_ERROR_EXIT)
