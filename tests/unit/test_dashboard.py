"""The dashboard, the alerts and the scrape config stay in step with the metrics the code defines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from lockgate.operations.supervisor import TARGETS_FILE
from lockgate.runtime import metrics
from lockgate.runtime.settings import default_var_dir

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "lockgate.json"
PROMETHEUS = REPO / "deploy" / "prometheus"

#: Series Prometheus makes itself, for every target.
SYNTHETIC = {"up"}
#: Labels every series gets from its target (file-based discovery, the scrape job) and
#: histogram buckets' own.
TARGET_LABELS = {"job", "instance", "process", "le"}

_NAME = re.compile(r"\b((?:lockgate|process|python)_[a-z0-9_]+|up)\b(?!\s*\()")
_SELECTOR = re.compile(r"\b(lockgate_[a-z0-9_]+)\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def dashboard_exprs() -> list[str]:
    def walk(panels: list[dict[str, Any]]) -> list[str]:
        out = []
        for panel in panels:
            out += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
            out += walk(panel.get("panels", []))
        return out

    return walk(json.loads(DASHBOARD.read_text())["panels"])


def alert_exprs() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [r["expr"] for group in rules["groups"] for r in group["rules"]]


def defined() -> set[str]:
    """Every series name the code's registry exposes, and those the projector promises."""
    return set(metrics.exposed_names()) | set(metrics.FROM_VIEWS) | SYNTHETIC


def base(name: str) -> str:
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def labels_of() -> dict[str, set[str]]:
    """Each lockgate metric's label names, by its name without a sample suffix."""
    out = {base(name): set(labels) for name, labels in metrics.FROM_VIEWS.items()}
    for collector in list(metrics.REGISTRY._collector_to_names):  # the client keeps no public list
        name = getattr(collector, "_name", "")
        if name.startswith("lockgate_"):
            out[base(name)] = set(getattr(collector, "_labelnames", ()))
    return out


def test_every_metric_the_dashboard_and_the_alerts_name_is_defined() -> None:
    exprs = dashboard_exprs() + alert_exprs()
    assert len(exprs) > 20
    named = {m.group(1) for e in exprs for m in _NAME.finditer(e)}
    assert named - defined() == set()


def test_every_label_they_select_or_group_by_is_one_the_metric_has() -> None:
    known = labels_of()
    everything = set().union(*known.values()) | TARGET_LABELS
    for expr in dashboard_exprs() + alert_exprs():
        for selector in _SELECTOR.finditer(expr):
            name, matchers = base(selector.group(1)), selector.group(2)
            used = {m.group(1) for m in _MATCHER.finditer(matchers)}
            assert used <= known[name] | TARGET_LABELS, (expr, used - known[name])
        for grouping in _GROUPING.finditer(expr):
            used = {g.strip() for g in grouping.group(1).split(",") if g.strip()}
            assert used <= everything, (expr, used - everything)


def test_the_dashboard_shows_what_operators_ask_for() -> None:
    text = " ".join(dashboard_exprs())
    for wanted in ("lockgate_candidates_total", "lockgate_policy_decisions_total",
                   "lockgate_handler_seconds_bucket", "lockgate_attempt_transitions_total",
                   "lockgate_attempts", "lockgate_unknown_outcomes_open", "lockgate_reviews_waiting",
                   "lockgate_review_oldest_age_seconds", "lockgate_projector_lag_events",
                   "lockgate_adapter_executions_total"):
        assert re.search(rf"\b{wanted}\b", text), wanted
    assert "histogram_quantile(0.5," in text and "histogram_quantile(0.99," in text


def test_every_panel_asks_the_chosen_prometheus() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_the_scrape_config_reads_the_targets_the_supervisor_writes() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert (PROMETHEUS / config["rule_files"][0]).is_file()
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "lockgate"  # the dashboard and alerts select job="lockgate"
    (files,) = [sd["files"] for sd in job["file_sd_configs"]]
    # Prometheus reads a relative path from the config file's own directory.
    assert [(PROMETHEUS / f).resolve() for f in files] == [
        (default_var_dir() / TARGETS_FILE).resolve()]


def test_the_projectors_metrics_are_its_own_once_it_exists() -> None:
    projector = REPO / "services" / "lockgate" / "projector"
    if not projector.is_dir():
        return  # not built yet: the names above are its promise
    source = "\n".join(p.read_text() for p in projector.rglob("*.py"))
    for name in metrics.FROM_VIEWS:
        assert base(name) in source, f"the projector defines no {name}"
