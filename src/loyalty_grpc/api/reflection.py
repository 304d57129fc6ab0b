"""gRPC server reflection in both versions of the protocol: `grpc.reflection.v1` (what
current clients ask for; some ask for nothing else) and `grpc.reflection.v1alpha` (older
clients).

grpcio-reflection (1.85) implements only v1alpha. v1 is the same protocol under another
package: grpc/reflection/v1/reflection.proto is v1alpha's file with `package
grpc.reflection.v1`, the same messages, field names and numbers, so a v1 message is the
same bytes as its v1alpha twin. Hence:

- the v1 service is v1alpha's servicer, registered under the v1 method path;
- its descriptor (for a client that also describes the reflection service itself) is
  v1alpha's file renamed to package grpc.reflection.v1, added to the default descriptor
  pool the servicer answers from.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"
_METHOD = "ServerReflectionInfo"


def enable_reflection(service_names: Iterable[str], server: grpc.Server) -> None:
    """Serve reflection v1 and v1alpha on `server`, listing `service_names` and both
    reflection services."""
    _add_v1_descriptor()
    servicer = reflection.ReflectionServicer(
        [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    )
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {_METHOD: v1}),)
    )


@cache
def _add_v1_descriptor() -> None:
    """grpc/reflection/v1/reflection.proto in the default pool (once per process; left
    alone if something else already put a v1 file there)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileContainingSymbol(V1_SERVICE_NAME)
    except KeyError:
        pool.AddSerializedFile(v1_file().SerializeToString())


def v1_file() -> descriptor_pb2.FileDescriptorProto:
    """v1alpha's reflection.proto as grpc/reflection/v1/reflection.proto."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", f".{V1_PACKAGE}."

    def renamed(type_name: str) -> str:
        return new + type_name.removeprefix(old) if type_name.startswith(old) else type_name

    def rename_fields(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
        for message in messages:
            for field in message.field:
                if field.HasField("type_name"):  # assigning "" would mark it present
                    field.type_name = renamed(field.type_name)
            rename_fields(message.nested_type)

    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.ClearField("options")  # v1alpha's: deprecated, and other languages' packages
    rename_fields(proto.message_type)
    for service in proto.service:
        for method in service.method:
            method.input_type = renamed(method.input_type)
            method.output_type = renamed(method.output_type)
    return proto


__all__ = ["V1ALPHA_SERVICE_NAME", "V1_SERVICE_NAME", "enable_reflection", "v1_file"]
