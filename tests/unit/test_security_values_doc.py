"""The numbers that docs/security.md and the pages of each endpoint state about request
values are the constants of their homes (a copy in prose, tied to its source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loyalty_grpc.api.edge_limits import MAX_HINT_DISTANCE, MAX_HINT_PATH, MAX_REQUEST_HEADERS_KB
from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain.amounts import MAX_CENTAVOS
from loyalty_grpc.domain.amounts import MAX_TEXTO as MAX_IMPORTE_TEXTO
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL
from loyalty_grpc.domain.detalle import MAX_DETALLE, MAX_SHOWN
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.promos import MAX_NOMBRE
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.domain.roster import LIMITE_MAX, MAX_LIMITE_TEXTO
from loyalty_grpc.domain.roster_cursor import CURSOR_LENGTH
from loyalty_grpc.domain.timestamps import MAX_TEXTO as MAX_TS_TEXTO

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")

IN_DOC = [
    f"| {MAX_FAN_TEXT} characters as sent |",
    f"| `id_externo` (`id`, `tx_id`) | {MAX_ID_EXTERNO} trimmed |",
    f"| `terminal` (`caja`), `sitio` (`sucursal`) | {MAX_LABEL} trimmed |",
    f"| `importe` as text | {MAX_IMPORTE_TEXTO} trimmed |",
    f"| {MAX_CENTAVOS // 100:,}.00 pesos ({MAX_CENTAVOS:,} cents) |",
    f"| `ts` as text | {MAX_TS_TEXTO} trimmed |",
    f"| `codigo`, each of `codigos` | {MAX_CODE_LENGTH} trimmed |",
    f"| `codigos` | {MAX_CODIGOS} entries |",
    f"| {MAX_NOMBRE} trimmed |",
    f"| {INT32_MAX:,} |",
    f"| {MAX_CODE_LENGTH} trimmed | 400 `codigo_invalido`, nothing added |",
    f"| {MAX_CODES_PER_CALL:,} entries read |",
    f"a cursor: exactly {CURSOR_LENGTH} characters",
    f"| {MAX_LIMITE_TEXTO} trimmed (values over {LIMITE_MAX} are served as {LIMITE_MAX}) |",
    f"At most **{MAX_DETALLE} characters**",
    f"shows at most {MAX_DETALLE} bytes",
    f"at most **{MAX_SHOWN} characters** of that escaped text",
    f"has at most {MAX_NOMBRE} characters too",
    f"(at most {MAX_SHOWN} characters of its escaped text,",
    f"computed only for paths up to {MAX_HINT_PATH} characters (an",
    f"edit distance of at most {MAX_HINT_DISTANCE} to each served path",
]
# (page of docs/, what it states)
IN_PAGES = [
    ("fan.md", f"**At most {MAX_FAN_TEXT} characters** as sent"),
    ("decisions.md", f"`detalle`** is at most {MAX_DETALLE} characters"),
    ("decisions.md", f"at most {MAX_SHOWN} characters of it"),
    ("decisions.md", f"shows any client value (at most {MAX_SHOWN} characters of it, then `…`)"),
    ("decisions.md", f"request headers over Envoy's {MAX_REQUEST_HEADERS_KB} KiB"),
    ("coupons.md", f"a name has at most {MAX_NOMBRE} characters"),
    ("roster.md", f"text of more than {MAX_LIMITE_TEXTO} characters"),
    ("coupons.md", f"longer than {MAX_CODE_LENGTH} characters after trimming"),
    ("sales.md", f"(above, ≤ {MAX_FAN_TEXT})"),
    ("sales.md", f"each ≤ {MAX_LABEL} characters"),
]


@pytest.mark.parametrize("text", IN_DOC)
def test_the_security_page_states_the_limits(text: str) -> None:
    assert text in DOC


@pytest.mark.parametrize(("page", "text"), IN_PAGES)
def test_the_endpoint_pages_state_the_limits(page: str, text: str) -> None:
    assert text in (ROOT / "docs" / page).read_text(encoding="utf-8")
