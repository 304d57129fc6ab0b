"""The fields of loyalty.v1.PosService for native gRPC callers only: typed alternatives of
the JSON contract's google.protobuf.Value fields (proto header, README "Native gRPC
clients"). One rule, the proto's field option `(loyalty.v1.nativo_de) = "<JSON field>"`;
read here for the generators (scripts/gen_request_check.py refuses them at the gateway,
scripts/gen_openapi.py leaves them out) and the tests.

The server fills a typed response field only for a call that did not come through the
gateway (api/call_metadata.from_gateway)."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb


def native_of(field: FieldDescriptor) -> str | None:
    """The JSON field that `field` is the typed form of; None for a field of the JSON API."""
    if not field.has_options:
        return None
    options = field.GetOptions()
    if not options.HasExtension(pb.nativo_de):
        return None
    json_name: str = options.Extensions[pb.nativo_de]
    return json_name


def json_fields(message: Descriptor) -> list[FieldDescriptor]:
    """The fields of `message` that the JSON API has (the native-only ones left out)."""
    return [field for field in message.fields if native_of(field) is None]


def native_fields(message: Descriptor) -> list[FieldDescriptor]:
    """The native-only fields of `message`."""
    return [field for field in message.fields if native_of(field) is not None]


def not_in_json(campo: str, json_name: str) -> str:
    """The detalle of the gateway's refusal of native-only field `campo` in a JSON call."""
    return (
        f"{campo}: campo solo para clientes gRPC nativos, no existe en la API JSON; "
        f"envíe {json_name}"
    )


__all__ = ["json_fields", "native_fields", "native_of", "not_in_json"]
