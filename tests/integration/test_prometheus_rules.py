"""The shipped monitoring, checked by Prometheus' own tool and against the code
(issue 24 §3): deploy/prometheus/alerts.yml passes `promtool check rules`, its unit tests
(deploy/prometheus/alerts_test.yml, synthetic series) pass `promtool test rules`, and
deploy/prometheus/prometheus.yml `promtool check config`. promtool is Debian's
`prometheus` package (.ci/run installs it); without it these three are skipped, saying so.

Without promtool: the server-side error selector of the rules and of the dashboard is the
one the error catalogue implies; every alert has a severity, a summary and a test; the
Grafana dashboard (deploy/grafana/loyalty.json) loads and is well formed. That every
metric they query is exported: tests/e2e/test_monitoring.py (real processes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
import yaml

from loyalty_grpc.api import observability
from loyalty_grpc.domain.errors import CATALOGO
from tests.monitoring import (
    ALERTS,
    ALERTS_TEST,
    SCRAPE_CONFIG,
    alert_rules,
    dashboard,
    dashboard_exprs,
    dashboard_panels,
)

PROMTOOL = shutil.which("promtool")
NO_PROMTOOL = "no promtool: apt-get install prometheus (Debian's package has promtool)"
# A call that failed on the server's side: its gRPC status is one of these.
SERVER_SIDE = frozenset(observability._SERVER_FAULTS | {grpc.StatusCode.DEADLINE_EXCEEDED})
_SELECTOR = re.compile(r'codigo=~"([^"]*)"')


def _promtool(*args: str) -> str:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ALERTS.parent,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_check_rules() -> None:
    assert f"SUCCESS: {len(alert_rules())} rules found" in _promtool("check", "rules", ALERTS.name)


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_test_rules() -> None:
    assert "SUCCESS" in _promtool("test", "rules", ALERTS_TEST.name)


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_promtool_check_config() -> None:
    assert "SUCCESS" in _promtool("check", "config", SCRAPE_CONFIG.name)


def test_server_errors_are_what_the_catalogue_says() -> None:
    """The codigos an error-rate query counts: the catalogue's whose gRPC status is a
    server-side one, and the lower-case names of those statuses (an outcome without
    ErrorInfo, api/observability.py)."""
    expected = {
        entrada.codigo.value
        for entrada in CATALOGO.values()
        if grpc.StatusCode[entrada.grpc] in SERVER_SIDE
    } | {code.name.lower() for code in SERVER_SIDE}
    selectors = [
        selector
        for expr in [str(rule["expr"]) for rule in alert_rules()] + dashboard_exprs()
        for selector in _SELECTOR.findall(expr)
    ]
    assert len(selectors) >= 2  # the alert and the dashboard panel
    for selector in selectors:
        assert set(selector.split("|")) == expected


def test_every_alert_has_a_severity_a_summary_and_a_unit_test() -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    names = [str(rule["alert"]) for rule in alert_rules()]
    assert len(names) == len(set(names))
    for rule in alert_rules():
        labels = rule["labels"]
        annotations = rule["annotations"]
        assert isinstance(labels, dict)
        assert isinstance(annotations, dict)
        assert labels["severity"] in {"warning", "critical"}, rule["alert"]
        assert annotations["summary"], rule["alert"]
        assert annotations["description"], rule["alert"]
    assert set(names) <= tested, f"alerts no test sees firing: {set(names) - tested}"


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    panels = dashboard_panels()
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}  # type: ignore[index]
    assert {"datasource", "instance"} <= variables
    queried = [panel for panel in panels if panel["type"] != "row"]
    assert queried
    for panel in queried:
        targets = panel["targets"]
        assert isinstance(targets, list)
        assert targets, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in targets:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """Each panel's query, with Grafana's variables given values, as a recording rule that
    `promtool check rules` parses."""
    substitutions = {"$__rate_interval": "5m", "$instance": ".*"}
    rules = []
    for i, query in enumerate(dashboard_exprs()):
        expr = query
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
        rules.append({"record": f"loyalty:dashboard_query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in _promtool("check", "rules", str(path))
