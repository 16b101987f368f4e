"""Adapters registered with a deployment besides the ones its settings name.

``lockgate adapter serve module:attr`` registers its adapter here, one file per adapter
(``<var>/adapters/<name>.json``: its name and capabilities, no secret), and asks the running
supervisor to take it in (``SIGUSR1``): the supervisor makes the adapter's user and
account with every other (``lockgate.operations.deployment``), has the broker reload its
accounts, and lists the adapter in ``run.json`` once its user can connect and reach what
its account imports. ``lockgate run`` includes every registered adapter when it starts
again, so the adapter's credentials keep working across restarts.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Mapping
from pathlib import Path

import msgspec

from lockgate.operations.deployment import _private_dir, _write_private

#: The signal that asks a running supervisor to take in the adapters registered since it
#: started. (SIGHUP stops a run, as a closed terminal should.)
TAKE_IN = signal.SIGUSR1

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Registration(msgspec.Struct, frozen=True, kw_only=True):
    """One registered adapter process: its name and the capabilities it serves."""

    name: str
    capabilities: tuple[str, ...]
    #: What serves it (``module:attr``), for whoever reads the directory.
    source: str = ""


def registry_dir(var_dir: Path) -> Path:
    """Where a deployment's registered adapters are."""
    return var_dir / "adapters"


def register(var_dir: Path, registration: Registration) -> Path:
    """Write ``registration`` (replacing an earlier one of the same name); return its file.

    Raises:
        ValueError: the name is not a subject token.
    """
    if not _NAME.fullmatch(registration.name):
        raise ValueError(f"adapter name {registration.name!r} is not a subject token "
                         "(letters, digits, - and _)")
    directory = registry_dir(var_dir)
    _private_dir(directory)
    path = directory / f"{registration.name}.json"
    _write_private(path, msgspec.json.format(msgspec.json.encode(registration)) + b"\n")
    return path


def registered(var_dir: Path) -> dict[str, tuple[str, ...]]:
    """Every registered adapter's capabilities, by name (unreadable files are skipped)."""
    found: dict[str, tuple[str, ...]] = {}
    directory = registry_dir(var_dir)
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(OSError, msgspec.MsgspecError):
            entry = msgspec.json.decode(path.read_bytes(), type=Registration)
            if entry.name == path.stem and entry.capabilities:
                found[entry.name] = tuple(entry.capabilities)
    return found


def merged(configured: Mapping[str, tuple[str, ...]], var_dir: Path) -> dict[str, tuple[str, ...]]:
    """The configured adapters and the registered ones; a configured name wins."""
    extra = {name: caps for name, caps in registered(var_dir).items() if name not in configured}
    return {**configured, **extra}
