"""The scale-out profile's files stay in step with the code (no Docker needed to check them)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import yaml

from lockgate.runtime.roles import demo_users, render_accounts
from lockgate.runtime.status import SERVICES

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "deploy" / "nats" / "cluster"


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def modules(services: dict[str, Any]) -> dict[str, str]:
    """Service name → the module its command runs with ``python -m``."""
    out = {}
    for name, spec in services.items():
        command = spec.get("command") or []
        if command[:2] == ["python", "-m"]:
            out[name] = command[2]
    return out


def test_every_module_compose_runs_exists() -> None:
    named = modules(compose()["services"])
    assert named, "docker-compose.yml names no python -m module"
    for name, module in named.items():
        assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"


def test_every_service_runs_twice_on_the_cluster_with_r3_streams() -> None:
    services = compose()["services"]
    assert {f"lockgate.{s}" for s in SERVICES} <= set(modules(services).values())
    for name in SERVICES:
        spec = services[name]
        assert spec["deploy"]["replicas"] == 2, name
        assert spec["environment"]["LOCKGATE_REPLICAS"] == "3", name
        assert spec["environment"]["LOCKGATE_NATS_URL"] == "nats://n1:4222", name
        assert spec["environment"]["LOCKGATE_CREDENTIALS_FILE"].endswith(f"/{name}.json"), name
    for node in ("n1", "n2", "n3"):
        assert services[node]["image"].startswith("nats:2.12")
        assert f"/etc/nats/{node}.conf" in services[node]["command"]


def test_compose_credentials_are_the_rendered_users() -> None:
    text = (REPO / "docker-compose.yml").read_text()
    wanted = set(re.findall(r"LOCKGATE_CREDENTIALS_FILE: /run/lockgate/credentials/([\w-]+)\.json", text))
    rendered = set(demo_users(["tenant-a"]))
    assert wanted and wanted <= rendered
    assert "LG_PASSWORD" not in text  # no password in an environment variable


def test_every_node_fsyncs_and_includes_the_authorization() -> None:
    confs = sorted(CLUSTER.glob("n*.conf"))
    assert [c.name for c in confs] == ["n1.conf", "n2.conf", "n3.conf"]
    for i, conf in enumerate(confs):
        text = conf.read_text()
        assert re.search(r"^\s*sync_interval:\s*always\s*$", text, re.M), conf.name
        assert re.search(r"^\s*max_payload:\s*4MB\s*$", text, re.M), conf.name
        assert "include ./accounts.conf" in text, conf.name
        assert f'listen: "127.0.0.1:{4222 + i}"' in text, conf.name
        assert f'listen: "127.0.0.1:{6222 + i}"' in text, conf.name


def test_the_example_accounts_are_what_roles_renders() -> None:
    example = (CLUSTER / "accounts.conf.example").read_text()
    users = demo_users(["tenant-a", "tenant-b"], password=lambda user: f"CHANGE-ME-{user}")
    assert example == render_accounts(users)


def test_no_two_test_files_share_a_name() -> None:
    """pytest imports test files by basename: two of one name stop the whole run at collection."""
    from collections import Counter

    names = Counter(p.name for p in (Path(__file__).parents[1]).rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
