"""The typed fields of loyalty.v1.PosService for native gRPC callers (`nativo_de`), over a
real channel on a real PostgreSQL with the demo data: each typed request field is read by
the same rules as its JSON field (limits, ts range, code rules), sending it with its JSON
field is solicitud_invalida as for any two aliases, and the typed response fields are filled
for native calls only (never for a call with the gateway mark, whose JSON must not change).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from sqlalchemy import Engine

from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.api.native_fields import json_fields, native_fields, native_of
from loyalty_grpc.domain.amounts import MAX_CENTAVOS
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.cli.demo import demo_document
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.uow import run_in_uow
from tests.support import error_info

KEY = "lp_vivo_DemoCajaPrincipalTodos0000001"
MD = (("authorization", f"Bearer {KEY}"),)
MARKED = (*MD, (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE))


@pytest.fixture(scope="module")
def stub(engine: Engine, channel: grpc.Channel) -> pb_grpc.PosServiceStub:
    run_in_uow(engine, apply_fixture, demo_document())
    return pb_grpc.PosServiceStub(channel)


def refused(call, request, metadata=MD) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=metadata)
    info = error_info(caught.value)
    return caught.value.code(), info.reason, info.metadata["detalle"]


def stamp(moment: datetime) -> timestamp_pb2.Timestamp:
    value = timestamp_pb2.Timestamp()
    value.FromDatetime(moment)
    return value


def test_every_native_field_names_a_json_field_of_its_message():
    """The one rule (the option) is well-formed: each native-only field names a JSON field
    of the same message, and is numbered from 20 (the JSON fields stay below)."""
    found = 0
    for message in pb.DESCRIPTOR.message_types_by_name.values():
        names = {f.name for f in json_fields(message)}
        for field in native_fields(message):
            found += 1
            assert native_of(field) in names, field.full_name
            assert field.number >= 20, field.full_name
        assert all(f.number < 20 for f in json_fields(message)), message.full_name
    assert found == 11


def test_sale_with_typed_fields(stub):
    moment = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    reply = stub.RegisterTx(
        pb.RegisterTxRequest(
            id_externo="nt-1", fan="DEMO0002", importe_centavos_entero=12550, ts_utc=stamp(moment)
        ),
        metadata=MD,
    )
    assert (reply.data.duplicado, reply.data.puntos_otorgados) == (False, 12)
    again = stub.RegisterTx(
        pb.RegisterTxRequest(id_externo="nt-1", fan="DEMO0002", importe_texto="$ 125.50"),
        metadata=MD,
    )
    assert again.data.duplicado  # the same sale: 125.50 pesos read by the same parser
    # importe (pesos) and a typed cents field that agree are one amount, as in JSON.
    both = stub.RegisterTx(
        pb.RegisterTxRequest(
            id_externo="nt-2",
            fan="DEMO0002",
            importe=struct_pb2.Value(number_value=10),
            importe_centavos_entero=1000,
        ),
        metadata=MD,
    )
    assert both.data.puntos_otorgados == 1


def test_zero_cents_is_an_amount_and_unset_is_not_sent(stub):
    reply = stub.RegisterTx(
        pb.RegisterTxRequest(id_externo="nt-0", fan="DEMO0002", importe_centavos_entero=0),
        metadata=MD,
    )
    assert reply.data.puntos_otorgados == 0
    assert refused(stub.RegisterTx, pb.RegisterTxRequest(id_externo="nt-x", fan="DEMO0002")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "campo_requerido",
        "falta importe (o importe_centavos / centavos / amount_cents)",
    )


@pytest.mark.parametrize(
    ("request_", "reason", "detalle"),
    [
        (
            pb.RegisterTxRequest(importe_centavos_entero=MAX_CENTAVOS + 1),
            "importe_invalido",
            f"importe_centavos_entero: {MAX_CENTAVOS + 1} excede el máximo de {MAX_CENTAVOS} "
            "centavos",
        ),
        (
            pb.RegisterTxRequest(importe_centavos_entero=-1),
            "importe_invalido",
            "importe_centavos_entero: -1 es negativo",
        ),
        (
            pb.RegisterTxRequest(importe_texto="12.345,678"),
            "importe_invalido",
            "importe_texto: ",
        ),
        (
            pb.RegisterTxRequest(importe_texto="1", importe=struct_pb2.Value(string_value="1")),
            "solicitud_invalida",
            "envíe solo uno de importe / importe_texto (llegaron importe, importe_texto)",
        ),
        (
            pb.RegisterTxRequest(
                importe_centavos_entero=100, centavos=struct_pb2.Value(number_value=100)
            ),
            "solicitud_invalida",
            "envíe solo uno de importe_centavos / centavos / amount_cents / "
            "importe_centavos_entero (llegaron centavos, importe_centavos_entero)",
        ),
        (
            pb.RegisterTxRequest(importe_texto="10", importe_centavos_entero=999),
            "importe_invalido",
            "importe_texto (1000 centavos) y importe_centavos_entero (999) no coinciden",
        ),
        (
            pb.RegisterTxRequest(
                importe_texto="1", ts_utc=stamp(datetime(1999, 12, 31, tzinfo=UTC))
            ),
            "ts_invalido",
            "ts_utc: Timestamp de 946598400 s es 1999-12-31T00:00:00.000Z, anterior a "
            "2000-01-01T00:00:00.000Z",
        ),
        (
            pb.RegisterTxRequest(
                importe_texto="1", ts_utc=timestamp_pb2.Timestamp(seconds=1, nanos=-1)
            ),
            "ts_invalido",
            "ts_utc: nanos -1 fuera de rango (de 0 a 999999999)",
        ),
        (
            pb.RegisterTxRequest(importe_texto="1", ts_utc=timestamp_pb2.Timestamp(seconds=10**15)),
            "ts_invalido",
            f"ts_utc: Timestamp de {10**15} s está más de 24 h en el futuro",
        ),
        (
            pb.RegisterTxRequest(
                importe_texto="1",
                ts=struct_pb2.Value(number_value=1795295812),
                ts_utc=timestamp_pb2.Timestamp(seconds=1795295812),
            ),
            "solicitud_invalida",
            "envíe solo uno de ts / ts_utc (llegaron ts, ts_utc)",
        ),
    ],
)
def test_typed_sale_fields_follow_the_json_rules(stub, request_, reason, detalle):
    request_.id_externo = "nt-bad"
    request_.fan = "DEMO0002"
    code, got_reason, got_detalle = refused(stub.RegisterTx, request_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert got_reason == reason
    assert got_detalle.startswith(detalle), got_detalle


def test_ts_utc_more_than_a_day_ahead_is_refused(stub):
    ahead = datetime.now(UTC) + timedelta(hours=25)
    _, reason, detalle = refused(
        stub.RegisterTx,
        pb.RegisterTxRequest(
            id_externo="nt-f", fan="DEMO0002", importe_texto="1", ts_utc=stamp(ahead)
        ),
    )
    assert reason == "ts_invalido"
    assert "más de 24 h en el futuro" in detalle


def test_resolve_fills_promo_detalle_for_native_callers_only(stub):
    native = stub.ResolveFan(pb.ResolveFanRequest(fan="DEMO0001"), metadata=MD)
    assert native.data.promo_detalle == pb.PromoActual(
        nombre="2x1 Hot Dog",
        descripcion="Dos hot dogs por el precio de uno en cualquier puesto del estadio.",
        vigencia_fin="2099-12-31",
        codigo="HD-0003",
    )
    # The Value is still there for native callers that read it.
    assert native.data.promo.struct_value.fields["codigo"].string_value == "HD-0003"
    marked = stub.ResolveFan(pb.ResolveFanRequest(fan="DEMO0001"), metadata=MARKED)
    assert not marked.data.HasField("promo_detalle")
    assert marked.data.promo == native.data.promo
    without = stub.ResolveFan(pb.ResolveFanRequest(fan="DEMO0003"), metadata=MD)
    assert not without.data.HasField("promo_detalle")
    assert without.data.promo.WhichOneof("kind") == "null_value"


def test_batch_redeem_fills_typed_results_for_native_callers_only(stub):
    codes = ["HD-0005", "hd-9999"]
    native = stub.Redeem(pb.RedeemRequest(codigos=codes), metadata=MD)
    first, second = native.data.resultados_detalle.resultados
    assert (first.codigo, first.ok, first.canje.duplicado, first.canje.promo) == (
        "HD-0005",
        True,
        True,
        "2x1 Hot Dog",
    )
    assert first.canje.fan.correo == "lupita.martinez@example.com"
    assert not first.HasField("error")
    assert (second.codigo, second.ok, second.error.codigo) == (
        "HD-9999",
        False,
        "codigo_no_encontrado",
    )
    assert second.error.mensaje == "No se encontró el código."
    assert len(native.data.resultados.values) == 2
    marked = stub.Redeem(pb.RedeemRequest(codigos=codes), metadata=MARKED)
    assert not marked.data.HasField("resultados_detalle")
    assert marked.data.resultados == native.data.resultados
    single = stub.Redeem(pb.RedeemRequest(codigo="HD-0005"), metadata=MD)
    assert not single.data.HasField("resultados_detalle")


def test_redeem_ts_utc(stub):
    reply = stub.Redeem(
        pb.RedeemRequest(codigo="HD-0005", ts_utc=stamp(datetime.now(UTC))), metadata=MD
    )
    assert reply.data.duplicado
    _, reason, _ = refused(
        stub.Redeem,
        pb.RedeemRequest(codigo="HD-0005", ts_utc=stamp(datetime.now(UTC) + timedelta(days=2))),
    )
    assert reason == "ts_invalido"


def test_deposit_codes_with_typed_fields(stub):
    reply = stub.DepositCodes(
        pb.DepositCodesRequest(promo_id_entero=1, codigos_lista=["NT-0001", "nt-0002"]),
        metadata=MD,
    )
    assert (reply.data.promo.nombre, reply.data.recibidos, reply.data.agregados) == (
        "2x1 Hot Dog",
        2,
        2,
    )
    by_name = stub.DepositCodes(
        pb.DepositCodesRequest(promo_texto="2x1 hot dog", codigos_lista=["NT-0001"]),
        metadata=MD,
    )
    assert by_name.data.duplicados == 1
    # The code rules are the JSON ones; a promo id 0 is sent (presence), not "absent".
    assert (
        refused(
            stub.DepositCodes, pb.DepositCodesRequest(promo_id_entero=1, codigos_lista=["A\tB"])
        )[1]
        == "codigo_invalido"
    )
    assert refused(
        stub.DepositCodes, pb.DepositCodesRequest(promo_id_entero=0, codigos_lista=["NT-9"])
    )[1:] == ("promo_no_encontrada", "promo_id_entero: no existe la promoción 0")
    assert refused(
        stub.DepositCodes,
        pb.DepositCodesRequest(
            promo_id_entero=1,
            codigos_lista=["NT-9"],
            codigos=struct_pb2.Value(string_value="NT-9"),
        ),
    )[1:] == (
        "solicitud_invalida",
        "envíe solo uno de codigos / codes / codigos_lista (llegaron codigos, codigos_lista)",
    )


def test_roster_with_typed_fields(stub):
    first = stub.RosterPost(pb.RosterPostRequest(limite_entero=2), metadata=MD)
    assert len(first.data.fans) == 2
    assert first.data.hay_mas
    rest = stub.RosterPost(
        pb.RosterPostRequest(desde_texto=first.data.siguiente, limite_entero=2000), metadata=MD
    )
    assert rest.data.desde == first.data.siguiente
    assert {f.id for f in first.data.fans}.isdisjoint(f.id for f in rest.data.fans)
    assert refused(stub.RosterPost, pb.RosterPostRequest(limite_entero=0))[1:] == (
        "solicitud_invalida",
        "limite: 0 es menor que 1; debe ser un entero de 1 a 2000 (por omisión 500)",
    )
    assert refused(
        stub.RosterPost,
        pb.RosterPostRequest(limite_entero=5, limite=struct_pb2.Value(number_value=5)),
    )[1:] == (
        "solicitud_invalida",
        "envíe solo uno de limite / limite_entero (llegaron limite, limite_entero)",
    )
    assert refused(stub.RosterPost, pb.RosterPostRequest(desde_texto="nada"))[1] == (
        "cursor_invalido"
    )
