"""Run the real supervisor over fake children: ``python -m fakes.supervise VAR_DIR PORT NAME ...``.

Each NAME is both the status name and the module ``fakes.<NAME>``.
"""

import asyncio
import sys
from pathlib import Path

from lockgate.operations.supervisor import run_supervisor
from lockgate.runtime.settings import Settings

if __name__ == "__main__":
    var_dir, port, *names = sys.argv[1:]
    settings = Settings(var_dir=Path(var_dir))
    children = [(name, f"fakes.{name}") for name in names]
    sys.exit(
        asyncio.run(run_supervisor(settings, embedded=True, port=int(port), children=children))
    )
