"""Subjects and keys of the agent-facing protocol, built and parsed in one place.

Every part that comes from a client is checked against the grammar before it becomes a
subject token or a key: nats-server closes the connection of a client that sends a
control line longer than ``max_control_line`` (4 KiB by default), and nats-py then
closes for good, so an unchecked name would not be refused, it would take the service
off the broker. Builders raise ``ValueError``; parsers never raise.
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.core.ids import is_capability_name, is_subject_token

#: Tenants and runs whose names start with this are Lockgate's own: ``open_run`` refuses
#: them, so a candidate recorded under one can never be mistaken for a client's.
RESERVED_PREFIX = "_"
#: Where a candidate is recorded whose subject names no valid tenant.
UNROUTABLE_TENANT = "_unroutable"
#: The run a candidate is recorded under when its subject names no valid run.
INVALID_RUN = "_invalid"

PROPOSE_ALL = "lg.propose.>"
RESPONSES_ALL = "lg.response.>"


def is_client_token(value: str) -> bool:
    """True when ``value`` may name a tenant, run or turn a client opens."""
    return is_subject_token(value) and not value.startswith(RESERVED_PREFIX)


def _token(value: str, what: str) -> str:
    if not is_subject_token(value):
        raise ValueError(f"{what} {value[:80]!r} is not a subject token")
    return value


def run_open_subject(tenant: str) -> str:
    """``lg.run.<tenant>.open``: the trusted host opens a run."""
    return f"lg.run.{_token(tenant, 'tenant')}.open"


def turn_subject(tenant: str, run_id: str) -> str:
    """``lg.turn.<tenant>.<run>``: an agent runtime opens a turn."""
    return f"lg.turn.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


def propose_subject(tenant: str, run_id: str) -> str:
    """``lg.propose.<tenant>.<run>``: where a candidate is published (stream ``LG_CANDIDATES``)."""
    return f"lg.propose.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


class ProposeAddress(NamedTuple):
    """The tenant and run a candidate's subject names, or where it is recorded instead."""

    tenant: str
    run_id: str
    routable: bool
    """False when the subject named no valid tenant or run (the others are stand-ins)."""


def parse_propose_subject(subject: str) -> ProposeAddress:
    """Where a candidate published on ``subject`` belongs; never raises.

    The stream takes ``lg.propose.>``, so a publisher may add tokens or use any
    characters the server allows; such a candidate is still recorded, under
    ``UNROUTABLE_TENANT`` or ``INVALID_RUN``.
    """
    parts = subject.split(".")
    tenant = parts[2] if len(parts) > 2 and is_client_token(parts[2]) else UNROUTABLE_TENANT
    if tenant != UNROUTABLE_TENANT and len(parts) == 4 and is_client_token(parts[3]):
        return ProposeAddress(tenant, parts[3], True)
    return ProposeAddress(tenant, INVALID_RUN, False)


def response_subject(tenant: str, run_id: str, candidate_id: str) -> str:
    """``lg.response.<tenant>.<run>.<candidate>``: what the model may learn of a candidate."""
    return (f"lg.response.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}."
            f"{_token(candidate_id, 'candidate id')}")


def run_key(tenant: str, run_id: str) -> str:
    """Key of a run in the runs bucket."""
    return f"{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


def turn_key(tenant: str, run_id: str, turn_id: str) -> str:
    """Key of a turn's catalogue digest in the runs bucket."""
    return f"{run_key(tenant, run_id)}.turn.{_token(turn_id, 'turn id')}"


def capability_key(name: str) -> str:
    """Key of a capability's registration in ``LG_CAPABILITIES``: its name, checked."""
    if not is_capability_name(name):
        raise ValueError(f"{name[:80]!r} is not a capability name")
    return name
