"""Start a fixture server as a real process, for tests and demos; always stopped on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from lockgate.worlds.mcpservers.run import MCP_PATH
from lockgate.worlds.mcpservers.state import PORT_FILE, read_port


def stdio_command(server: str, state_dir: Path | str) -> tuple[str, ...]:
    """The command that serves ``server`` over stdio with its state in ``state_dir``."""
    return (sys.executable, "-m", "lockgate.worlds.mcpservers", server, "--stdio",
            "--state", str(state_dir))


class HttpServerProcess:
    """A fixture server on streamable HTTP, on an ephemeral loopback port."""

    def __init__(self, server: str, state_dir: Path | str, *, start_timeout_s: float = 20.0,
                 token_file: Path | None = None) -> None:
        """``token_file``: serve only requests carrying its bearer token."""
        self.server = server
        self.token_file = token_file
        self.state_dir = Path(state_dir)
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint.

        Raises:
            RuntimeError: the server is not running.
        """
        if self.port is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self.port}{MCP_PATH}"

    def start(self) -> HttpServerProcess:
        """Start the process and wait until it has written its port.

        Raises:
            RuntimeError: it exited, or wrote no port within ``start_timeout_s``.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / PORT_FILE).unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lockgate.worlds.mcpservers", self.server, "--http",
             "--host", "127.0.0.1", "--port", "0", "--state", str(self.state_dir),
             *(["--token-file", str(self.token_file)] if self.token_file else [])],
            start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while (port := read_port(self.state_dir)) is None:
            if self.process.poll() is not None:
                raise RuntimeError(f"server {self.server} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server {self.server} wrote no port in {self.start_timeout_s} s")
            time.sleep(0.05)
        self.port = port
        return self

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once the process ended within ``timeout_s``; None if it still runs."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) if it runs."""
        process, self.process, self.port = self.process, None, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> HttpServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
