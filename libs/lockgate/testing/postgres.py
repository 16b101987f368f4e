"""A throwaway PostgreSQL server for tests (``lockgate.runtime.postgres``, which
``lockgate run --cluster`` also starts, with its data kept under ``var/``)."""

from __future__ import annotations

from lockgate.runtime.postgres import (
    DATABASE as DATABASE,
)
from lockgate.runtime.postgres import (
    USER as USER,
)
from lockgate.runtime.postgres import (
    PostgresServer as PostgresServer,
)
from lockgate.runtime.postgres import (
    PostgresUnavailable as PostgresUnavailable,
)
from lockgate.runtime.postgres import (
    available as available,
)
