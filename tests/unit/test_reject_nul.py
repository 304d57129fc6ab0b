"""api/requests.reject_nul: U+0000 anywhere in a request's text is refused, naming the
top-level field (strings, repeated strings, google.protobuf.Value/Struct/ListValue)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from loyalty_grpc.api.requests import reject_nul
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb


def _struct(**fields: Any) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(fields)
    return value


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ResolveFanRequest(fan="A\x00"), "fan"),
        (pb.RedeemRequest(codigos=["A", "B\x00"]), "codigos"),
        (pb.RegisterTxRequest(importe=struct_pb2.Value(string_value="1\x00")), "importe"),
        (
            pb.RegisterTxRequest(
                importe=struct_pb2.Value(
                    list_value=struct_pb2.ListValue(values=[struct_pb2.Value(string_value="\x00")])
                )
            ),
            "importe",
        ),
        (
            pb.RegisterTxRequest(importe=struct_pb2.Value(struct_value=_struct(**{"a\x00": 1}))),
            "importe",
        ),
        (
            pb.RegisterTxRequest(importe=struct_pb2.Value(struct_value=_struct(a={"b": "\x00"}))),
            "importe",
        ),
    ],
)
def test_a_nul_anywhere_is_refused(request_: Message, field: str) -> None:
    with pytest.raises(LoyaltyError) as caught:
        reject_nul(request_)
    assert caught.value.codigo is CodigoError.SOLICITUD_INVALIDA
    assert caught.value.detalle == f"{field}: contiene el carácter NUL (U+0000)"


def test_text_without_nul_passes() -> None:
    reject_nul(
        pb.RegisterTxRequest(
            id_externo="V-1",
            fan="ñandú \t\x01",
            importe=struct_pb2.Value(struct_value=_struct(a=[1, "x"])),
        )
    )
