"""The scale-out profile's files are what the code renders, and hang together (no Docker needed).

Drift: every file ``lockgate.operations.deployfiles`` renders is checked in as rendered.
Shape: ``docker-compose.yml`` is valid against the Compose Specification's schema
(vendored under ``deploy/compose-spec/``); every supervised process has its replicas; each
container mounts only its own credentials, of a user of the role table with that role;
every Prometheus target is a compose service serving metrics on that port.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lockgate.operations import deployfiles
from lockgate.operations.deployment import main as make_users
from lockgate.operations.roles import admin_role, roles
from lockgate.operations.status import ADAPTERS, CHILDREN, SERVICES, child_user
from lockgate.operations.supervisor import replicas_of
from lockgate.runtime.credentials import load_credentials

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "deploy" / "compose-spec" / "compose-spec.json"


def load_yaml(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict), path
    return loaded


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(REPO / "docker-compose.yml")


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def lockgate_services(services: dict[str, Any]) -> dict[str, Any]:
    """The services that run a Lockgate module (``python -m lockgate...``)."""
    return {n: s for n, s in services.items()
            if s.get("command", [])[:2] == ["python", "-m"]
            and str(s["command"][2]).startswith("lockgate.")}


# -- drift ---------------------------------------------------------------------------------


def test_every_rendered_file_is_checked_in_as_rendered() -> None:
    stale = deployfiles.differences(REPO, deployfiles.render_all())
    assert stale == [], (
        f"{stale} differ from what the code renders: run "
        "`.venv/bin/python -m lockgate.operations.deployfiles` and commit the result")


def test_the_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    files = deployfiles.render_all()
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert deployfiles.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "docker-compose.yml").write_text(files["docker-compose.yml"] + "# edited\n")
    assert deployfiles.main(["--root", str(tmp_path), "--check"]) == 1


def test_the_host_nodes_are_the_local_clusters_nodes() -> None:
    """The files under deploy/nats/cluster/ are make cluster's nodes, on its default ports."""
    for i, name in enumerate(("n1", "n2", "n3")):
        text = (REPO / "deploy" / "nats" / "cluster" / f"{name}.conf").read_text()
        assert f"server_name: {name}\n" in text
        assert f'listen: "127.0.0.1:{4222 + i}"' in text
        assert f'listen: "127.0.0.1:{6222 + i}"' in text
        assert f'http: "127.0.0.1:{8222 + i}"' in text
        assert f'store_dir: "var/cluster/{name}"' in text


# -- the Compose Specification ---------------------------------------------------------


def compose_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    # The file says draft-07 (without the trailing '#' the validator looks up).
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_compose_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in compose_validator().iter_errors(compose)]
    assert errors == []


def test_the_schema_refuses_what_compose_would(compose: dict[str, Any]) -> None:
    """The validator is not vacuous: a misspelt key or a bad type is refused."""
    validator = compose_validator()
    typo = json.loads(json.dumps(compose))
    typo["services"]["intake"]["replica"] = 2
    assert list(validator.iter_errors(typo))
    wrong = json.loads(json.dumps(compose))
    wrong["services"]["intake"]["depends_on"]["admin"]["condition"] = "service_finished"
    assert list(validator.iter_errors(wrong))


# -- the processes ---------------------------------------------------------------------------


def test_every_supervised_process_runs_with_the_local_clusters_replicas(services: dict[str, Any]) -> None:
    for name, module in CHILDREN:
        service = services[child_user(name)]
        assert service["command"] == ["python", "-m", module], name
        assert service["deploy"]["replicas"] == replicas_of(name), name
    for name in SERVICES:
        assert services[name]["deploy"]["replicas"] == 2, name
    for status_name, _ in ADAPTERS:
        assert services[child_user(status_name)]["deploy"]["replicas"] == 2, status_name
    for name in ("projector", "archiver", "console"):
        assert services[name]["deploy"]["replicas"] == 1, name


def test_every_module_compose_runs_exists(services: dict[str, Any]) -> None:
    named = {n: s["command"][2] for n, s in lockgate_services(services).items()}
    assert len(named) == len(CHILDREN) + 2  # and the admin job, and the admin keeping the leaders
    for name, module in named.items():
        assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"


def test_the_admin_job_runs_once_before_every_process(services: dict[str, Any]) -> None:
    admin = services[deployfiles.ADMIN_SERVICE]
    assert admin["command"] == ["python", "-m", "lockgate.operations.admin"]
    assert admin["restart"] == "on-failure" and "deploy" not in admin
    # Then the admin stays once, handing partitions' leaderships back after a node was down.
    keeper = services[deployfiles.LEADERS_SERVICE]
    assert keeper["command"] == ["python", "-m", "lockgate.operations.admin", "--keep-leaders"]
    assert keeper["restart"] == "unless-stopped" and "deploy" not in keeper
    assert admin["depends_on"] == {n: {"condition": "service_healthy"} for n in ("n1", "n2", "n3")}
    for name, service in lockgate_services(services).items():
        if name != deployfiles.ADMIN_SERVICE:
            assert service["depends_on"][deployfiles.ADMIN_SERVICE] == {
                "condition": "service_completed_successfully"}, name


def test_every_process_is_on_the_cluster_with_r3_and_partitions(services: dict[str, Any]) -> None:
    for name, service in lockgate_services(services).items():
        env = service["environment"]
        assert env["LOCKGATE_NATS_URL"] == "nats://n1:4222,nats://n2:4222,nats://n3:4222", name
        assert env["LOCKGATE_REPLICAS"] == "3", name
        assert env["LOCKGATE_EVENT_PARTITIONS"] == "3", name
        assert "LOCKGATE_MANAGE_TOPOLOGY" not in env, name  # only the admin job creates it


def test_the_nodes_mount_their_own_configuration_and_fsync(services: dict[str, Any]) -> None:
    for i, node in enumerate(("n1", "n2", "n3")):
        service = services[node]
        assert service["image"] == deployfiles.NATS_IMAGE
        assert f"./deploy/nats/compose/{node}.conf:/etc/nats/nats-server.conf:ro" in service["volumes"]
        assert service["ports"] == [f"{4222 + i}:4222"]
        text = (REPO / "deploy" / "nats" / "compose" / f"{node}.conf").read_text()
        assert re.search(r"^\s*sync_interval: always$", text, re.M), node
        assert f"server_name: {node}\n" in text
        routes = set(re.findall(r"nats-route://(n\d):6222", text))
        assert routes == {"n1", "n2", "n3"} - {node}, node
        assert text.rstrip().endswith("include ./accounts.conf")


# -- credentials -------------------------------------------------------------------------


def own_credentials(compose: dict[str, Any], name: str) -> list[str]:
    """The credentials files a service mounts: the host paths of its ``nats-*`` secrets."""
    service = compose["services"][name]
    files = []
    for secret in service.get("secrets", []):
        source = secret["source"] if isinstance(secret, dict) else secret
        path = compose["secrets"][source]["file"]
        if "/credentials/" in path:
            files.append(path)
    return files


def test_each_container_mounts_only_its_own_credentials(compose: dict[str, Any]) -> None:
    table = {r.name: r for r in roles(deployfiles.TENANTS)}
    expected = {child_user(name): child_user(name) for name, _ in CHILDREN}
    expected[deployfiles.ADMIN_SERVICE] = admin_role().name
    expected[deployfiles.LEADERS_SERVICE] = admin_role().name
    users = Counter()
    for name, service in compose["services"].items():
        mounted = own_credentials(compose, name)
        volumes = " ".join(str(v) for v in service.get("volumes", []))
        assert "credentials" not in volumes, f"{name} mounts a credentials directory"
        if name not in expected:
            assert mounted == [], f"{name} is no Lockgate process but mounts {mounted}"
            continue
        assert len(mounted) == 1, f"{name} mounts {mounted}"
        user = Path(mounted[0]).stem
        assert user == expected[name], name
        assert user in table, f"{name}: {user} is no user of the role table"
        assert table[user].name == expected[name]
        target = next(s["target"] for s in service["secrets"] if s["source"] == f"nats-{user}")
        assert service["environment"]["LOCKGATE_CREDENTIALS_FILE"] == target
        users[user] += 1
    # One container per user; the admin's two (the job, then the one keeping the leaders).
    assert users.pop(admin_role().name) == 2
    assert all(count == 1 for count in users.values()), users


def test_the_nodes_include_the_accounts_every_credential_belongs_to(services: dict[str, Any]) -> None:
    for node in ("n1", "n2", "n3"):
        assert "./deploy/nats/cluster/accounts.conf:/etc/nats/accounts.conf:ro" in services[node]["volumes"]
    example = (REPO / "deploy" / "nats" / "cluster" / "accounts.conf.example").read_text()
    for _, service in lockgate_services(services).items():
        user = service["secrets"][0]["source"].removeprefix("nats-")
        assert f'user: "{user}"' in example, user


def test_no_password_is_in_the_environment_or_a_url(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for key, value in service.get("environment", {}).items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), (name, key)
            assert not re.search(r"://[^/@]*:[^/@]*@", str(value)), (name, key)


def accounts_of(conf: str) -> dict[str, tuple[str, str]]:
    """user → (its account, its role) in a rendered accounts block."""
    found: dict[str, tuple[str, str]] = {}
    account = ""
    role = ""
    for line in conf.splitlines():
        if m := re.fullmatch(r"  (\w+): \{", line):
            account = m[1]
        elif m := re.fullmatch(r"\s+# role: ([\w.-]+);.*", line):
            role = m[1]
        elif m := re.fullmatch(r'\s+user: "([^"]+)"', line):
            found[m[1]] = (account, role)
    return found


def test_making_the_users_writes_every_file_compose_mounts(tmp_path: Path, compose: dict[str, Any]) -> None:
    out = tmp_path / "users"
    assert make_users(["--tenants", ",".join(deployfiles.TENANTS), "--out", str(out)]) == 0
    prefix = f"./{deployfiles.USERS_DIR}/"
    for source, secret in compose["secrets"].items():
        path = out / secret["file"].removeprefix(prefix)
        assert path.is_file(), f"secret {source}: {path} was not made"
        assert path.stat().st_mode & 0o077 == 0, path
    # Each container's credentials name a user of the accounts the nodes include, in the
    # account and with the role the credentials say.
    accounts = accounts_of((out / "accounts.conf").read_text())
    for name in lockgate_services(compose["services"]):
        (path,) = own_credentials(compose, name)
        creds = load_credentials(out / path.removeprefix(prefix))
        assert creds.user == Path(path).stem
        assert accounts[creds.user] == (creds.account, creds.user), name
    password = (out / "secrets" / "postgres-password").read_text()
    assert make_users(["--tenants", ",".join(deployfiles.TENANTS), "--out", str(out)]) == 0
    assert (out / "secrets" / "postgres-password").read_text() == password  # kept
    assert (out / "secrets" / "pgpass").read_text() == f"*:*:lockgate:lockgate:{password}"


def test_every_file_compose_mounts_from_the_checkout_is_there(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            host = str(volume).split(":", 1)[0]
            if host.startswith("./") and not host.startswith(f"./{deployfiles.USERS_DIR}/accounts.conf"):
                assert (REPO / host).exists(), f"{name}: {host}"


# -- the views ----------------------------------------------------------------------------


def test_the_read_side_reads_the_views_on_postgresql(services: dict[str, Any]) -> None:
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    for name in ("projector", "archiver", "console"):
        service = services[name]
        env = service["environment"]
        assert env["LOCKGATE_VIEWS_URL"] == "postgresql://lockgate@postgres:5432/lockgate"
        assert {"source": "pgpass", "target": env["PGPASSFILE"]} in service["secrets"]
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for name in SERVICES:
        assert "LOCKGATE_VIEWS_URL" not in services[name]["environment"], name


# -- Prometheus and Grafana -----------------------------------------------------------------


def test_every_prometheus_target_is_a_compose_service_with_a_metrics_port(services: dict[str, Any]) -> None:
    config = load_yaml(REPO / "deploy" / "prometheus" / "compose.yml")
    assert services["prometheus"]["command"] == ["--config.file=/etc/prometheus/compose.yml"]
    scraped: set[str] = set()
    for job in config["scrape_configs"]:
        assert job["job_name"] == "lockgate"  # what alerts.yml asks about
        for sd in job["dns_sd_configs"]:
            port = sd["port"]
            for name in sd["names"]:
                service = services[name]
                assert str(port) in service["expose"], name
                assert service["environment"]["LOCKGATE_METRICS_PORT"] == str(port), name
                assert service["environment"]["LOCKGATE_METRICS_ADDR"] == "0.0.0.0", name
                scraped.add(name)
    processes = set(lockgate_services(services)) - {deployfiles.ADMIN_SERVICE, deployfiles.LEADERS_SERVICE}
    assert scraped == processes
    assert config["rule_files"] == ["alerts.yml"]
    assert (REPO / "deploy" / "prometheus" / "alerts.yml").is_file()


def test_grafana_is_provisioned_with_the_dashboard(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    mounts = {str(v).split(":")[0]: str(v).split(":")[1] for v in grafana["volumes"]}
    dashboards = load_yaml(REPO / "deploy" / "grafana" / "provisioning" / "dashboards" / "lockgate.yml")
    folder = dashboards["providers"][0]["options"]["path"]
    assert mounts["./deploy/grafana/lockgate.json"] == f"{folder}/lockgate.json"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    sources = load_yaml(REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "lockgate.yml")
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    port = services["prometheus"]["ports"][0].split(":")[-1]
    assert source["url"] == f"http://prometheus:{port}"


def test_no_two_test_files_share_a_name() -> None:
    """pytest imports test files by basename: two of one name stop the whole run at collection."""
    names = Counter(p.name for p in (Path(__file__).parents[1]).rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []


def test_only_the_hosts_loopback_reaches_a_published_port(services: dict[str, Any]) -> None:
    """Agent runtimes reach the NATS nodes (every connection authenticated); the console,
    Prometheus and Grafana are published on the host's 127.0.0.1 only, and the console
    listens on its container's interfaces, where the published port arrives."""
    published = {name: svc["ports"] for name, svc in services.items()
                 if "ports" in svc and not name.startswith("n")}
    assert set(published) == {"console", "prometheus", "grafana"}
    for ports in published.values():
        assert all(str(p).startswith("127.0.0.1:") for p in ports), ports
    console = services["console"]
    assert console["environment"]["LOCKGATE_CONSOLE_ADDR"] == "0.0.0.0"
    assert published["console"] == [f"127.0.0.1:{console['environment']['LOCKGATE_CONSOLE_PORT']}:"
                                    f"{console['environment']['LOCKGATE_CONSOLE_PORT']}"]
