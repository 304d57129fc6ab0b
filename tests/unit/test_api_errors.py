"""Error mapping: every catalogue entry becomes a valid gRPC status and envelope."""

from __future__ import annotations

import json

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from loyalty_grpc.api.errors import ENVELOPE_KEY, HTTP_STATUS_KEY, envelope, to_grpc_status
from loyalty_grpc.domain.errors import CATALOGO, CodigoError, LoyaltyError


@pytest.mark.parametrize("codigo", list(CodigoError))
def test_every_catalogue_entry_maps(codigo: CodigoError):
    entrada = CATALOGO[codigo]
    status = to_grpc_status(LoyaltyError(codigo, "campo `x`: ñandú"), for_gateway=True)
    assert status.code == getattr(grpc.StatusCode, entrada.grpc)
    assert status.code != grpc.StatusCode.OK
    trailing = dict(status.trailing_metadata)
    assert trailing[HTTP_STATUS_KEY] == str(entrada.http)
    body = trailing[ENVELOPE_KEY]
    assert isinstance(body, str)
    assert body.isascii()
    assert json.loads(body) == {
        "ok": False,
        "error": {
            "codigo": codigo.value,
            "mensaje": entrada.mensaje,
            "detalle": "campo `x`: ñandú",
        },
    }
    rich = status_pb2.Status.FromString(trailing["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert rich.details[0].Unpack(info)
    assert info.reason == codigo.value


@pytest.mark.parametrize("codigo", list(CodigoError))
def test_without_the_gateway_only_the_grpc_status(codigo: CodigoError):
    """A native gRPC caller (no gateway mark): the status and its ErrorInfo, no envelope."""
    error = LoyaltyError(codigo, "detalle", retry_after=3)
    native = to_grpc_status(error, (("ratelimit", "r"),), for_gateway=False)
    marked = to_grpc_status(error, (("ratelimit", "r"),), for_gateway=True)
    assert (native.code, native.details) == (marked.code, marked.details)
    gateway_only = {HTTP_STATUS_KEY, ENVELOPE_KEY}
    assert not gateway_only & {key for key, _ in native.trailing_metadata}
    assert [m for m in marked.trailing_metadata if m[0] not in gateway_only] == list(
        native.trailing_metadata
    )
    assert {"grpc-status-details-bin", "retry-after", "ratelimit"} <= dict(
        native.trailing_metadata
    ).keys()


def test_envelope_key_order_and_bytes():
    body = envelope(LoyaltyError(CodigoError.PERMISO_DENEGADO, "requiere fan:leer"))
    assert body == (
        '{"ok":false,"error":{"codigo":"permiso_denegado",'
        '"mensaje":"La clave no tiene permiso para esto.",'
        '"detalle":"requiere fan:leer"}}'
    )


def test_catalogue_is_complete_and_statuses_valid():
    assert set(CATALOGO) == set(CodigoError)
    for entrada in CATALOGO.values():
        assert 400 <= entrada.http <= 599
        assert hasattr(grpc.StatusCode, entrada.grpc)
        assert entrada.mensaje
        assert entrada.mensaje[-1] == "."
