"""The readable output of `loyalty admin` (`--json` prints the message as JSON instead):
enum values as the domain's Spanish words, Timestamps as ISO 8601 UTC text."""

from __future__ import annotations

import json
from collections.abc import Iterable

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from loyalty_grpc.api.backoffice_values import TABLES, iso_text
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb


def render(message: Message) -> list[str]:
    """Readable lines: each record on one line of `campo=valor` (empty text left out);
    lists one record per line; the response's own fields (`creado`, the secret of a new
    key) on a line each. A ledger: the fan's line, then a table of its entries."""
    if isinstance(message, pb.GetLedgerResponse):
        return [_record(message.fan), *ledger_table(message.entries)]
    lines: list[str] = []
    for descriptor in message.DESCRIPTOR.fields:
        value = getattr(message, descriptor.name)
        if descriptor.message_type is None:
            lines.append(f"{descriptor.name}: {_text(_plain(message, descriptor.name))}")
        elif descriptor.is_repeated:
            lines.extend(_record(item) for item in value)
        elif message.HasField(descriptor.name):
            lines.append(_record(value))
    if isinstance(message, pb.IssueKeyResponse):
        lines.append("(la clave se muestra solo esta vez; guárdala ahora)")
    if not lines:
        lines.append("(nada)")
    return lines


LEDGER_COLUMNS = ("fecha (UTC)", "motivo", "puntos", "venta", "código", "saldo", "nota")


def ledger_table(entries: Iterable[pb.LedgerEntry]) -> list[str]:
    """The ledger as an aligned table, one entry a line, oldest first; numbers right-aligned,
    credits with `+`."""
    rows = [
        (
            (iso_text(e.creado) if e.HasField("creado") else "")
            .replace("T", " ")
            .removesuffix("Z")[:19],
            e.motivo,
            f"{e.puntos:+d}",
            str(e.venta) if e.venta else "",
            e.codigo,
            str(e.saldo),
            " ".join(e.nota.split()),
        )
        for e in entries
    ]
    if not rows:
        return ["(sin movimientos)"]
    widths = [max(len(r[i]) for r in [LEDGER_COLUMNS, *rows]) for i in range(len(LEDGER_COLUMNS))]
    numeric = {2, 3, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(LEDGER_COLUMNS), *(line(r) for r in rows)]


def _record(message: Message) -> str:
    """`campo=valor` for every field; empty text and empty lists are left out (numbers and
    booleans always show, 0 included)."""
    pairs = ((d.name, _plain(message, d.name)) for d in message.DESCRIPTOR.fields)
    return "  ".join(
        f"{name}={_text(value)}"
        for name, value in pairs
        if not (isinstance(value, str) or hasattr(value, "__len__")) or len(value) > 0
    )


def _plain(message: Message, name: str) -> object:
    """A field's value as plain data: an enum value as its domain text ("" when
    unspecified), a Timestamp as ISO 8601 UTC text ("" when unset), anything else as is."""
    descriptor = message.DESCRIPTOR.fields_by_name[name]
    value = getattr(message, name)
    if descriptor.enum_type is not None:
        return TABLES[descriptor.enum_type.full_name].text(value)
    if descriptor.message_type is Timestamp.DESCRIPTOR:
        return iso_text(value) if message.HasField(name) else ""
    return value


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "sí" if value else "no"
    if isinstance(value, str):
        return (
            value
            if value and not any(c.isspace() for c in value)
            else json.dumps(value, ensure_ascii=False)
        )
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)
