"""Generate the Grafana dashboard deploy/grafana/loyalty.json (issue 24 §3).

    python scripts/gen_dashboard.py           # rewrite it
    python scripts/gen_dashboard.py --check   # exit 1 when it is stale

The panels are the data below; the JSON is Grafana's dashboard model (schemaVersion 39,
Grafana 10 and later import it: Dashboards > New > Import, or file provisioning). A
`datasource` variable picks the Prometheus data source, and `instance` the servers.
Every metric a panel queries is one the service or Envoy exports
(tests/e2e/test_monitoring_names.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "grafana" / "loyalty.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SERVICE = 'job="loyalty", instance=~"$instance"'
GATEWAY = 'job="loyalty-gateway"'
POS = 'method=~"loyalty\\\\.v1\\\\.PosService/.*"'
SERVER_FAULTS = (
    "error_interno|servicio_no_disponible|tiempo_agotado|internal|unknown|unavailable"
    "|data_loss|deadline_exceeded"
)


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    # (legend, PromQL)
    targets: tuple[tuple[str, str], ...]
    description: str = ""
    kind: str = "timeseries"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Calls",
        (
            Panel(
                "Calls per second by outcome",
                "reqps",
                (
                    (
                        "{{codigo}}",
                        "sum by (codigo) (rate("
                        f"loyalty_requests_total{{{SERVICE}}}[$__rate_interval]))",
                    ),
                ),
                "`ok` or the error catalogue's codigo.",
            ),
            Panel(
                "Server-side errors (ratio)",
                "percentunit",
                (
                    (
                        "server errors",
                        f'sum(rate(loyalty_requests_total{{{SERVICE}, codigo=~"{SERVER_FAULTS}"}}'
                        "[$__rate_interval])) / "
                        f"sum(rate(loyalty_requests_total{{{SERVICE}}}[$__rate_interval]))",
                    ),
                ),
                "Alert LoyaltyServerErrors above 1%.",
            ),
            Panel(
                "PosService latency",
                "s",
                tuple(
                    (
                        f"p{q}",
                        f"histogram_quantile(0.{q}, sum by (le) (rate("
                        f"loyalty_request_seconds_bucket{{{SERVICE}, {POS}}}[$__rate_interval])))",
                    )
                    for q in ("5", "9", "99")
                ),
                "The calls a cashier waits for. Alert LoyaltyCheckoutLatencyHigh: p99 > 500 ms.",
            ),
            Panel(
                "p99 latency by method",
                "s",
                (
                    (
                        "{{method}}",
                        "histogram_quantile(0.99, sum by (method, le) (rate("
                        f"loyalty_request_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                    ),
                ),
            ),
            Panel(
                "Rate-limited calls by method",
                "reqps",
                (
                    (
                        "{{method}}",
                        "sum by (method) (rate("
                        f"loyalty_rate_limited_total{{{SERVICE}}}[$__rate_interval]))",
                    ),
                ),
                "Refused with demasiadas_llamadas (per key; the call log's clave_id says which).",
            ),
            Panel(
                "Calls in flight",
                "short",
                (("{{instance}}", f"sum by (instance) (loyalty_requests_in_flight{{{SERVICE}}})"),),
            ),
        ),
    ),
    (
        "Database",
        (
            Panel(
                "Database reachable",
                "short",
                (("{{instance}}", f"loyalty_database_up{{{SERVICE}}}"),),
                "1 when the metrics endpoint read PostgreSQL at the scrape.",
                kind="stat",
            ),
            Panel(
                "Pool connections",
                "short",
                (
                    ("size", f"sum(loyalty_db_pool_size{{{SERVICE}}})"),
                    (
                        "size + max overflow",
                        f"sum(loyalty_db_pool_size{{{SERVICE}}}) + "
                        f"sum(loyalty_db_pool_max_overflow{{{SERVICE}}})",
                    ),
                    ("open", f"sum(loyalty_db_pool_connections{{{SERVICE}}})"),
                    ("checked out", f"sum(loyalty_db_pool_checked_out{{{SERVICE}}})"),
                    ("idle", f"sum(loyalty_db_pool_idle{{{SERVICE}}})"),
                ),
                "Summed over the live workers.",
            ),
            Panel(
                "Saturated workers / overflow in use",
                "short",
                (
                    ("saturated workers", f"sum(loyalty_db_pool_saturated_workers{{{SERVICE}}})"),
                    ("overflow in use", f"sum(loyalty_db_pool_overflow_in_use{{{SERVICE}}})"),
                ),
            ),
        ),
    ),
    (
        "Wallet pass and processes",
        (
            Panel(
                "Wallet outbox: fans waiting",
                "short",
                (("{{instance}}", f"loyalty_wallet_outbox_fans{{{SERVICE}}}"),),
                "Exact up to 10,000, an estimate beyond.",
            ),
            Panel(
                "Wallet outbox: oldest waiting",
                "s",
                (("{{instance}}", f"loyalty_wallet_outbox_oldest_seconds{{{SERVICE}}}"),),
            ),
            Panel(
                "Restarts (last hour)",
                "short",
                (
                    (
                        "{{instance}} {{process}}",
                        f"increase(loyalty_process_restarts_total{{{SERVICE}}}[1h])",
                    ),
                ),
            ),
            Panel(
                "Version",
                "short",
                (("{{instance}} {{version}}", f"loyalty_build_info{{{SERVICE}}}"),),
                kind="table",
            ),
        ),
    ),
    (
        "Gateway (Envoy)",
        (
            Panel(
                "Gateway requests by response class",
                "reqps",
                (
                    (
                        "{{instance}} {{envoy_response_code_class}}xx",
                        "sum by (instance, envoy_response_code_class) (rate("
                        f"envoy_http_downstream_rq_xx{{{GATEWAY}}}[$__rate_interval]))",
                    ),
                ),
            ),
            Panel(
                "Days until the first certificate expires",
                "d",
                (
                    (
                        "{{instance}}",
                        f"envoy_server_days_until_first_cert_expiring{{{GATEWAY}}} < 100000",
                    ),
                ),
                "4294967295 (hidden) when no certificate is loaded.",
                kind="stat",
            ),
            Panel(
                "Gateway restarts and reloads (last hour)",
                "short",
                (
                    (
                        "{{instance}} restarts",
                        f"increase(loyalty_gateway_restarts_total{{{GATEWAY}}}[1h])",
                    ),
                    (
                        "{{instance}} reloads",
                        f"increase(loyalty_gateway_reloads_total{{{GATEWAY}}}[1h])",
                    ),
                ),
                "Envoy started again by `gateway run` (or `up`) after it died; "
                "`gateway reload`s that changed its configuration. "
                "Alert LoyaltyGatewayRestarted.",
            ),
            Panel(
                "Envoy serving since",
                "s",
                (("{{instance}}", f"time() - loyalty_gateway_start_time_seconds{{{GATEWAY}}}"),),
                "How long the Envoy serving now has run.",
                kind="stat",
            ),
            Panel(
                "Gateway: last Envoy exit",
                "short",
                (
                    (
                        "{{instance}}",
                        f"loyalty_gateway_last_exit_code{{{GATEWAY}}} "
                        f"and loyalty_gateway_last_exit_time_seconds{{{GATEWAY}}} > 0",
                    ),
                ),
                "Exit code of the last Envoy that ended; negative: the signal (-9: SIGKILL).",
                kind="table",
            ),
        ),
    ),
)


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, object]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                **({"format": "table", "instant": True} if panel.kind == "table" else {}),
            }
            for i, (legend, expr) in enumerate(panel.targets)
        ],
    }


def dashboard() -> dict[str, object]:
    panels: list[dict[str, object]] = []
    y = 0
    for row_title, row_panels in ROWS:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for i, panel in enumerate(row_panels):
            if i and i % 3 == 0:
                y += 8
            panels.append(_panel(panel, len(panels) + 1, (i % 3) * 8, y))
        y += 8
    return {
        "uid": "loyalty-pos",
        "title": "Loyalty POS service",
        "tags": ["loyalty"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "instance",
                    "label": "Server",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": {
                        "query": 'label_values(loyalty_build_info{job="loyalty"}, instance)',
                        "refId": "instances",
                    },
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/gen_dashboard.py")
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
