"""A throwaway PostgreSQL server for tests (``lockgate.operations.postgres``, which
``lockgate run --cluster`` also starts, with its data kept under ``var/``)."""

from __future__ import annotations

from lockgate.operations.postgres import (
    DATABASE as DATABASE,
)
from lockgate.operations.postgres import (
    USER as USER,
)
from lockgate.operations.postgres import (
    PostgresServer as PostgresServer,
)
from lockgate.operations.postgres import (
    PostgresUnavailable as PostgresUnavailable,
)
from lockgate.operations.postgres import (
    available as available,
)
