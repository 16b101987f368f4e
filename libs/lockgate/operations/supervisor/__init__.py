"""``make run``: the embedded NATS server and every service as supervised child processes.

On the embedded default every process connects as its own NATS user: before the
broker starts, the supervisor makes the deployment's users and credentials under
``var/`` (``lockgate.operations.deployment``), starts ``nats-server`` with their accounts,
creates the topology as ``admin`` and hands each child its own credentials file.

It keeps everything running: a child that exits is started again (with backoff); a
child that stops answering ``lg.status.<name>``, or answers that it is stuck, is killed
and started again; a broker that dies or hangs is started again on the same store. A
child that exits with ``CONFIG_ERROR_EXIT`` cannot run as configured, and starting it
again changes nothing: it is not restarted, and a run that is not ready yet stops.

Every child serves its metrics on a loopback port of its own and names it in its status
answer; the supervisor serves its own (restarts, who is well) and keeps
``var/prometheus/targets.json`` listing all of them, for Prometheus's file-based
discovery (``deploy/prometheus/prometheus.yml``), rewritten whenever a child comes back
on another port.

Adapters registered while it runs (``lockgate adapter serve``) are taken in on SIGUSR1:
their users are made, the broker reloads its accounts, and ``run.json`` lists them
(``_AdapterIntake``); a later start includes them from the outset.

Each child runs in a process group of its own, so the supervisor can stop it together
with anything it started (and a Ctrl-C on the terminal reaches the supervisor only,
which then stops the children in order instead of racing them).

One module per concern: ``run`` (the run's steps), ``broker`` (the embedded server and
its port), ``cluster_profile`` (the local cluster and the views' PostgreSQL), ``topology``
(users, connection, streams), ``children`` (processes and restarts), ``watch`` (readiness
and health), ``intake`` (adapters on SIGUSR1), ``targets`` (the metrics targets file) and
``shutdown`` (signals and stopping).
"""

from lockgate.operations.supervisor.broker import (
    DEFAULT_PORT,
    PortState,
    probe_port,
    server_name_at,
)
from lockgate.operations.supervisor.children import (
    BACKOFF_MAX_S,
    BACKOFF_MIN_S,
    CONSOLE_PORT_ENV,
    STABLE_AFTER_S,
    last_line,
    parent_death_signal,
)
from lockgate.operations.supervisor.cluster_profile import (
    CLUSTER_CHILD_REPLICAS,
    cluster_dir,
    replicas_of,
)
from lockgate.operations.supervisor.intake import RELOAD_SETTLE_S, RELOAD_TRIES
from lockgate.operations.supervisor.report import SupervisorError
from lockgate.operations.supervisor.run import run_supervisor
from lockgate.operations.supervisor.shutdown import STOP_TIMEOUT_S
from lockgate.operations.supervisor.targets import TARGETS_FILE, Targets
from lockgate.operations.supervisor.topology import (
    CONNECT_TIMEOUT_S,
    TOPOLOGY_STREAMS,
    TOPOLOGY_TIMEOUT_S,
    unserved_adapters,
)
from lockgate.operations.supervisor.watch import (
    BROKER_UNRESPONSIVE_S,
    READY_LINE,
    READY_TIMEOUT_S,
    UNRESPONSIVE_S,
    WATCH_EVERY_S,
)

__all__ = [
    "BACKOFF_MAX_S",
    "BACKOFF_MIN_S",
    "BROKER_UNRESPONSIVE_S",
    "CLUSTER_CHILD_REPLICAS",
    "CONNECT_TIMEOUT_S",
    "CONSOLE_PORT_ENV",
    "DEFAULT_PORT",
    "READY_LINE",
    "READY_TIMEOUT_S",
    "RELOAD_SETTLE_S",
    "RELOAD_TRIES",
    "STABLE_AFTER_S",
    "STOP_TIMEOUT_S",
    "TARGETS_FILE",
    "TOPOLOGY_STREAMS",
    "TOPOLOGY_TIMEOUT_S",
    "UNRESPONSIVE_S",
    "WATCH_EVERY_S",
    "PortState",
    "SupervisorError",
    "Targets",
    "cluster_dir",
    "last_line",
    "parent_death_signal",
    "probe_port",
    "replicas_of",
    "run_supervisor",
    "server_name_at",
    "unserved_adapters",
]
