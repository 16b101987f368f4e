"""``python -m lockgate.client.mcp --stdio | --http [--host H] [--port N] [--port-file F]``.

Logs go to stderr only: on stdio, stdout is the protocol channel.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lockgate.client.mcp.http import serve_http
from lockgate.client.mcp.server import serve_stdio
from lockgate.client.mcp.session import Lockgate
from lockgate.client.mcp.settings import FrontSettings
from lockgate.runtime.entry import CONFIG_ERROR_EXIT, configuration_problem

log = logging.getLogger("lockgate.client.mcp")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.client.mcp",
        description="Lockgate as an MCP server. Settings: LOCKGATE_FRONT_* and/or --config.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve the host on stdin/stdout (either era)")
    mode.add_argument("--http", action="store_true", help="serve streamable HTTP on loopback")
    parser.add_argument("--config", type=Path, help="a JSON or YAML file of settings")
    parser.add_argument("--host", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (0: any free port)")
    parser.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    return parser


def settings_from(args: argparse.Namespace) -> FrontSettings:
    """The settings: command-line options over the environment over the configuration file.

    Raises:
        ValidationError: a setting is missing or invalid.
    """
    chosen: dict[str, Any] = {}
    if args.config is not None:
        chosen["config_file"] = args.config
    if args.host is not None:
        chosen["http_host"] = args.host
    if args.port is not None:
        chosen["http_port"] = args.port
    if args.port_file is not None:
        chosen["port_file"] = args.port_file
    return FrontSettings(**chosen)


async def _main(args: argparse.Namespace, settings: FrontSettings) -> int:
    lockgate = Lockgate(settings)
    try:
        if args.stdio:
            await serve_stdio(lockgate)
            return 0
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        return await serve_http(lockgate, settings, stop)
    finally:
        await lockgate.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the front door; the exit status says whether it started and stopped cleanly."""
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s mcp-front %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from(args)
    except (ValidationError, OSError, ValueError) as exc:
        # One line: a pydantic error's own text runs over several, with a link per field.
        line = configuration_problem(exc) or f"{type(exc).__name__}: {exc}".splitlines()[0]
        print(f"lockgate mcp front door: bad settings: {line}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    logging.getLogger().setLevel(settings.log_level.upper())
    try:
        return asyncio.run(_main(args, settings))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
