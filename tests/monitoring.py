"""What the shipped monitoring (deploy/prometheus/alerts.yml, deploy/grafana/loyalty.json)
queries: its PromQL expressions and the metric names they name, read from the files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "loyalty.json"

# PromQL words that look like names: aggregation modifiers, set operators, `bool`, `offset`.
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"bool", "offset", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, label names and values,
    durations and keywords left out)."""
    text = _STRING.sub('""', expr)
    text = _LABEL_LIST.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = re.sub(r"\$__\w+", " ", text)
    return {name for name in _IDENT.findall(text) if name.lower() not in _KEYWORDS}


def alert_rules() -> list[dict[str, object]]:
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def _dashboard_panels(panels: list[dict[str, object]]) -> Iterator[dict[str, object]]:
    for panel in panels:
        yield panel
        inner = panel.get("panels")
        if isinstance(inner, list):
            yield from _dashboard_panels(inner)


def dashboard() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def dashboard_panels() -> list[dict[str, object]]:
    panels = dashboard()["panels"]
    assert isinstance(panels, list)
    return list(_dashboard_panels(panels))


def dashboard_exprs() -> list[str]:
    exprs: list[str] = []
    for panel in dashboard_panels():
        targets = panel.get("targets", [])
        assert isinstance(targets, list)
        exprs.extend(str(target["expr"]) for target in targets)
    return exprs


def queried_names() -> dict[str, set[str]]:
    """Metric name -> where it is queried (alert names, dashboard panel titles)."""
    where: dict[str, set[str]] = {}
    for rule in alert_rules():
        for name in metric_names(str(rule["expr"])):
            where.setdefault(name, set()).add(f"alert {rule['alert']}")
    for panel in dashboard_panels():
        for target in panel.get("targets", []):  # type: ignore[attr-defined]
            for name in metric_names(str(target["expr"])):
                where.setdefault(name, set()).add(f"panel {panel['title']!r}")
    return where
