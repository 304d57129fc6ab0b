"""A caller of the JSON API through the gateway (Envoy) with a client that
openapi-python-client generates from gateway/openapi.json (docs/clients.md): it pings,
resolves a fan, registers a sale (twice, as a till whose first answer was lost: the same
id_externo) and reads `puntos_acreditados`, redeems two codes in one call (the batch
form's own type), then shows a failure's envelope.

    python -m venv .venv && .venv/bin/pip install -r requirements.txt
    .venv/bin/openapi-python-client generate --path ../../gateway/openapi.json \
        --meta none --output-path loyalty_api --config generator.yaml
    .venv/bin/mypy --strict client.py
    LOYALTY_URL=http://127.0.0.1:8080 LOYALTY_KEY=lp_vivo_DemoCajaPrincipalTodos0000001 \
        .venv/bin/python client.py

`mypy --strict` is the check that the document types these calls (a field or a model the
document does not have fails it). Each step prints one JSON line. A real client also
retries as docs/errors.md says; this example makes each call once.
"""

from __future__ import annotations

import json
import os
import sys
import time

from loyalty_api.api.default import ping_get, redeem, register_tx, resolve_fan
from loyalty_api.client import AuthenticatedClient
from loyalty_api.models import (
    ErrorEnvelope,
    PingGetResponse200,
    RedeemBatchData,
    RedeemBatchEntryOk,
    RedeemRequest,
    RedeemResponse200,
    RegisterTxRequest,
    RegisterTxResponse200,
    ResolveFanRequest,
    ResolveFanResponse200,
)
from loyalty_api.types import UNSET


class CallFailedError(Exception):
    """A failure of any operation: the status and the contract's envelope."""

    def __init__(self, status: int, envelope: ErrorEnvelope) -> None:
        super().__init__(f"{status} {envelope.error.codigo}: {envelope.error.mensaje}")
        self.status = status
        self.envelope = envelope


def print_step(step: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"paso": step, **fields}, ensure_ascii=False) + "\n")


def main() -> int:
    base_url = os.environ.get("LOYALTY_URL", "http://127.0.0.1:8080")
    key = os.environ.get("LOYALTY_KEY", "lp_vivo_DemoCajaPrincipalTodos0000001")
    id_externo = os.environ.get("LOYALTY_ID_EXTERNO", f"py-{time.time_ns()}")
    client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)
    with client:
        ping = ping_get.sync_detailed(client=client)
        if not isinstance(ping.parsed, PingGetResponse200):
            raise CallFailedError(ping.status_code, _envelope(ping.parsed))
        print_step(
            "ping",
            ok=ping.parsed.ok,
            programa=ping.parsed.data.programa,
            modo=ping.parsed.data.modo.value,
        )

        resolved = resolve_fan.sync_detailed(client=client, body=ResolveFanRequest(fan="DEMO0001"))
        if not isinstance(resolved.parsed, ResolveFanResponse200):
            raise CallFailedError(resolved.status_code, _envelope(resolved.parsed))
        promo = resolved.parsed.data.promo
        print_step(
            "resolve",
            fan=resolved.parsed.data.fan.id,
            puntos=resolved.parsed.data.fan.puntos,
            promo=None if promo is None else promo.codigo,
        )

        sale = RegisterTxRequest(
            id_externo=id_externo, fan="DEMO0002", importe="125.50", terminal="Caja Python"
        )
        for step in ("tx", "tx_retry"):
            answer = register_tx.sync_detailed(client=client, body=sale)
            if not isinstance(answer.parsed, RegisterTxResponse200):
                raise CallFailedError(answer.status_code, _envelope(answer.parsed))
            data = answer.parsed.data
            print_step(
                step,
                duplicado=data.duplicado,
                tx=data.tx,
                puntos_otorgados=data.puntos_otorgados,
                puntos_acreditados=data.puntos_acreditados,
                saldo=data.saldo,
            )

        # A batch redeem: its answer is the document's RedeemBatchData (the single form's
        # is RedeemSingleData), each entry an ok or an error entry.
        redeemed = redeem.sync_detailed(
            client=client, body=RedeemRequest(codigos=["HD-0004", "HD-9999"], terminal="Caja Py")
        )
        if not isinstance(redeemed.parsed, RedeemResponse200):
            raise CallFailedError(redeemed.status_code, _envelope(redeemed.parsed))
        batch = redeemed.parsed.data
        if not isinstance(batch, RedeemBatchData):
            raise RuntimeError("a batch redeem answered the single form")
        print_step(
            "redeem",
            resumen=batch.resumen.to_dict(),
            resultados=[
                {"codigo": entry.codigo, "puntos_acreditados": entry.puntos_acreditados}
                if isinstance(entry, RedeemBatchEntryOk)
                else {"codigo": entry.codigo, "error": entry.error.codigo.value}
                for entry in batch.resultados
            ],
        )

        missing = resolve_fan.sync_detailed(client=client, body=ResolveFanRequest(fan="NOEXISTE99"))
        if not isinstance(missing.parsed, ErrorEnvelope):
            raise RuntimeError(f"an unknown fan was resolved: HTTP {missing.status_code}")
        error = missing.parsed.error
        print_step(
            "error",
            status=int(missing.status_code),
            ok=missing.parsed.ok,
            codigo=error.codigo,
            mensaje=error.mensaje,
            detalle=None if error.detalle is UNSET else error.detalle,
        )
    return 0


def _envelope(parsed: ErrorEnvelope | None) -> ErrorEnvelope:
    if parsed is None:
        raise RuntimeError("an answer the document does not describe")
    return parsed


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CallFailedError as failure:
        print_step("fallo", status=failure.status, error=failure.envelope.error.to_dict())
        sys.exit(1)
