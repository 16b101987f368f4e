"""``python -m lockgate.mcp``: the MCP adapter process."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

from lockgate.mcp.config import ConfigError, McpSettings, load_servers
from lockgate.mcp.records import JetStreamRecords, McpRecords
from lockgate.mcp.service import NAME, McpAdapter
from lockgate.runtime import loop, metrics
from lockgate.runtime.entry import (
    ConfigurationError,
    connect,
    exit_if_misconfigured,
    until_signalled,
)
from lockgate.runtime.settings import Settings


def sdk_installed() -> bool:
    """True when the MCP SDK (the ``mcp`` extra) can be imported."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):
        return False


async def serve(settings: Settings, mcp: McpSettings, stop: asyncio.Event) -> None:
    """Connect as the MCP adapter's user and serve until ``stop`` is set.

    Raises:
        ConfigurationError: the broker refused the credentials, there are none to read, or
            the servers file is malformed.
    """
    if not sdk_installed():  # the ``mcp`` extra: needed to speak to any MCP server
        raise ConfigurationError("the MCP SDK is not installed: pip install 'lockgate[mcp]'")
    try:
        servers = load_servers(mcp.servers_file)
    except ConfigError as exc:
        raise ConfigurationError(f"not a servers file: {exc}") from None
    endpoint = metrics.start_endpoint(settings)   # like every adapter process's
    try:
        nc = await connect(settings, name=f"adapter.{NAME}", stop=stop)
        try:
            records = McpRecords(JetStreamRecords(nc.jetstream(prefix=settings.js_prefix)))
            adapter = McpAdapter(nc, servers, records, secrets_dir=mcp.secrets_dir,
                                 js_prefix=settings.js_prefix, ack_wait_s=settings.ack_wait_s,
                                 metrics_url=metrics.url_of(endpoint))
            await adapter.start()
            logging.getLogger(__name__).info("MCP adapter up: %d servers configured from %s",
                                             len(servers.servers), mcp.servers_file)
            await stop.wait()
            await adapter.close()
        finally:
            await nc.drain()
    finally:
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)


def main() -> None:
    """Read the settings and the servers file; serve the mapped capabilities."""
    with exit_if_misconfigured(f"adapter.{NAME}"):
        settings = Settings()
        logging.basicConfig(level=settings.log_level)
        # Transport libraries would log request headers (an Authorization secret) at debug level.
        for noisy in ("httpx", "httpx2", "httpcore", "mcp"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        mcp = McpSettings()
        loop.run(until_signalled(lambda stop: serve(settings, mcp, stop), name=f"adapter.{NAME}"))


if __name__ == "__main__":
    main()
