"""``python -m lockgate.mcp``: the MCP adapter process."""

from __future__ import annotations

import asyncio
import logging
import signal

import nats

from lockgate.mcp.config import McpSettings, load_servers
from lockgate.mcp.records import JetStreamRecords, McpRecords
from lockgate.mcp.service import NAME, McpAdapter
from lockgate.runtime import loop, metrics
from lockgate.runtime.settings import Settings


async def serve(settings: Settings, mcp: McpSettings) -> None:
    """Connect as the MCP adapter's user and serve until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(sig, stop.set)
    servers = load_servers(mcp.servers_file)
    options = settings.connect_options()
    options.setdefault("name", f"adapter.{NAME}")
    endpoint = metrics.start_endpoint(settings)   # like every adapter process's
    nc = await nats.connect(**options)  # type: ignore[arg-type]
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
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)


def main() -> None:
    """Read the settings and the servers file; serve the mapped capabilities."""
    settings = Settings()
    logging.basicConfig(level=settings.log_level)
    # Transport libraries would log request headers (an Authorization secret) at debug level.
    for noisy in ("httpx", "httpx2", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    loop.run(serve(settings, McpSettings()))


if __name__ == "__main__":
    main()
