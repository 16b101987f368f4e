"""``python -m lockgate.cli``: the ``lockgate`` command."""

import sys

from lockgate.cli.app import main

sys.exit(main())
