"""``lockgate adapter serve | scaffold``: typed Python functions as capabilities.

``lockgate adapter serve module:attr`` runs a module's capability functions as one adapter process.

``attr`` names a capability function, or a list, tuple or dict of them; without ``:attr``
every capability function the module defines is served. Against a running ``lockgate run``
(found by its ``run.json``) the command

1. registers the adapter: ``<var>/adapters/<name>.json``, its name and capabilities
   (``lockgate.operations.registered``); a capability another adapter serves is refused;
2. asks the supervisor to take it in (``SIGUSR1``): it makes the adapter's broker user and
   account as it makes every other (``lockgate.operations.roles.adapter_role``), has the
   broker reload its accounts, and lists the adapter in ``run.json`` once the new user
   reaches what its account imports;
3. connects with the adapter's own credentials file and serves until SIGINT or SIGTERM
   (``run_adapter``), within seconds.

``lockgate run`` started again includes registered adapters, so the user stays. Without a
running system it says so and exits non-zero. With ``LOCKGATE_CREDENTIALS_FILE`` set it
registers nothing and serves as that user (a deployment whose users someone else makes).

``lockgate adapter scaffold module:attr --out DIR`` writes a policy starting point for
them (``lockgate.adapters.scaffold``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from lockgate.adapters.functions import CapabilityFunction, collect
from lockgate.adapters.scaffold import scaffold
from lockgate.adapters.worker import run_adapter
from lockgate.cli.group import CommandGroup, Subparsers, add_globals
from lockgate.client.output import Output
from lockgate.core.errors import LockgateError
from lockgate.operations.registered import TAKE_IN, Registration, register, registered
from lockgate.runtime import loop
from lockgate.runtime.credentials import RunInfo, credentials_path, read_run_info
from lockgate.runtime.entry import exit_if_misconfigured
from lockgate.runtime.settings import Settings

#: How long ``serve`` waits for the supervisor to take its adapter in.
TAKE_IN_TIMEOUT_S = 30.0


class ServeError(LockgateError):
    """``lockgate adapter serve`` cannot serve as asked (one line says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="adapter.serve")


def load(target: str) -> tuple[list[CapabilityFunction], str]:
    """Import ``module[:attr]``; return its capability functions and the default adapter name.

    The current directory is importable, as it is for ``python -m``.

    Raises:
        ServeError: the module does not import, or holds no capability function there.
    """
    module_name, _, attr = target.partition(":")
    if not module_name:
        raise ServeError(f"{target!r}: name a module, as module or module:attr")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ServeError(f"cannot import {module_name}: {exc}") from exc
    try:
        held = functools.reduce(getattr, attr.split("."), module) if attr else module
    except AttributeError as exc:
        raise ServeError(f"{module_name} has no {attr}") from exc
    try:
        functions = collect(held)
    except TypeError as exc:
        raise ServeError(str(exc)) from exc
    name = re.sub(r"[^A-Za-z0-9_-]", "-", module_name.rsplit(".", 1)[-1])[:64]
    return functions, name


async def take_in(var_dir: Path, registration: Registration,
                  timeout_s: float = TAKE_IN_TIMEOUT_S) -> RunInfo:
    """Register the adapter with the run under ``var_dir`` and wait until it is taken in.

    Raises:
        ServeError: nothing runs there, its users are not its own, a capability is another
            adapter's, or the supervisor did not take the adapter in.
    """
    info = read_run_info(var_dir)
    if info is None:
        raise ServeError(f"no Lockgate runs from {var_dir} (no live run.json): start "
                         "`lockgate run` first, or set LOCKGATE_VAR_DIR / --var-dir to its var directory")
    if not info.embedded or not info.credentials_dir:
        raise ServeError("this run's broker users are not made by `lockgate run`; give the "
                         "adapter a user there and set LOCKGATE_CREDENTIALS_FILE")
    name, caps = registration.name, list(registration.capabilities)
    if name in info.adapters and name not in registered(var_dir):
        # The deployment's own adapter (its settings name it): a registration would not replace it.
        raise ServeError(f"adapter {name} is one the deployment's settings name, serving "
                         f"{', '.join(info.adapters[name])}; choose another --name")
    taken = {c: other for other, served in info.adapters.items() if other != name for c in served}
    clash = [f"{c} (adapter {taken[c]})" for c in caps if c in taken]
    if clash:
        raise ServeError(f"already served by another adapter: {', '.join(clash)}")
    if info.adapters.get(name) == caps:
        return info
    try:
        register(var_dir, registration)
    except ValueError as exc:
        raise ServeError(str(exc)) from exc
    try:
        os.kill(info.pid, TAKE_IN)
    except ProcessLookupError:
        raise ServeError("the run stopped before it could take the adapter in") from None
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        now = read_run_info(var_dir)
        if now is None:
            raise ServeError("the run stopped before it took the adapter in")
        if now.adapters.get(name) == caps:
            return now
        if asyncio.get_running_loop().time() > deadline:
            raise ServeError(f"the run did not take adapter {name} in within {timeout_s:g}s "
                             "(see its output)")
        await asyncio.sleep(0.1)


def serve_command(args: argparse.Namespace, out: Output) -> int:
    """``lockgate adapter serve``: register (unless given a user), then serve until signalled.

    Says once what it serves (with ``--json``: ``{"adapter", "capabilities", "url"}``);
    its log goes to stderr.
    """
    functions, default = load(args.target)
    name = args.name or default
    settings = Settings()
    if settings.credentials_file is None:
        registration = Registration(name=name, capabilities=tuple(f.name for f in functions),
                                    source=args.target)
        info = asyncio.run(take_in(settings.var_dir, registration))
        settings = Settings(nats_url=info.url,
                            credentials_file=credentials_path(settings.var_dir, f"adapter-{name}"))
    logging.basicConfig(level=settings.log_level)
    caps = [f.name for f in functions]
    out.record({"adapter": name, "capabilities": caps, "url": settings.nats_url},
               text=f"lockgate: adapter {name} serving {', '.join(caps)} on {settings.nats_url}")
    with exit_if_misconfigured(f"adapter.{name}"):
        loop.run(run_adapter([f.adapter() for f in functions], settings, name=name))
    return 0


def scaffold_command(args: argparse.Namespace, out: Output) -> int:
    """``lockgate adapter scaffold``: write the policy starting point; list what it wrote."""
    functions, default = load(args.target)
    try:
        written = scaffold(functions, args.out, args.name or default, args.target)
    except FileExistsError as exc:
        raise ServeError(str(exc)) from exc
    out.rows({"WROTE": "path"}, [{"path": str(path)} for path in written], empty="wrote nothing",
             widest=4096)
    return 0


def _register(sub: Subparsers) -> None:
    """Add ``adapter serve`` and ``adapter scaffold`` to the ``lockgate`` command line."""
    adapter = sub.add_parser("adapter", help="serve typed Python functions as capabilities "
                                             "(`serve`), or write their policy starting point (`scaffold`)")
    add_globals(adapter)
    verbs = adapter.add_subparsers(dest="adapter_command", required=True)
    serve = verbs.add_parser("serve", help="run a module's capability functions as one adapter "
                                           "process with a broker user of its own")
    scaf = verbs.add_parser("scaffold", help="write a Cedar schema fragment and a commented "
                                             "policy bundle for a module's capability functions")
    for p in (serve, scaf):
        add_globals(p)
        p.add_argument("target", metavar="module[:attr]",
                       help="the module, and the function or list/tuple/dict of them in it")
        p.add_argument("--name", default=None,
                       help="the adapter's name (default: the module's last name)")
    scaf.add_argument("--out", type=Path, required=True, metavar="DIR",
                      help="where to write <name>.cedarschema and <name>.cedar")


def _run(args: argparse.Namespace, out: Output) -> int:
    """Dispatch ``lockgate adapter …``; what it says goes through ``out``."""
    commands: dict[str, Callable[[argparse.Namespace, Output], int]] = {
        "serve": serve_command, "scaffold": scaffold_command}
    return commands[args.adapter_command](args, out)


#: It serves or writes files; it does not look for a running system first.
ADAPTER = CommandGroup("adapter", _register, _run)
