"""The comments of proto/loyalty/v1/pos_service.proto, by full name: what the runtime
descriptors lack (protoc keeps comments only in a descriptor set built with source info).
The OpenAPI document (scripts/gen_openapi.py) takes its field and operation descriptions
from here, so the proto stays their one home.

    comments()["loyalty.v1.PingData.programa"]      # a field's leading comment
    comments()["loyalty.v1.PosService.Ping"]        # a method's
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from gen_proto import GATEWAY_PROTO, _protoc
from google.protobuf import descriptor_pb2

# Paths in SourceCodeInfo: the field numbers of FileDescriptorProto, DescriptorProto and
# ServiceDescriptorProto that hold messages, fields, nested messages, services, methods.
_MESSAGE, _FIELD, _NESTED, _SERVICE, _METHOD = 4, 2, 3, 6, 2


def _text(comment: str) -> str:
    """A comment as one paragraph: its lines joined, the comment markers' spaces gone."""
    return " ".join(line.strip() for line in comment.strip().splitlines() if line.strip())


def _messages(
    prefix: str, path: tuple[int, ...], messages: Iterable[descriptor_pb2.DescriptorProto]
) -> dict[tuple[int, ...], str]:
    names: dict[tuple[int, ...], str] = {}
    for index, message in enumerate(messages):
        here = (*path, index)
        name = f"{prefix}.{message.name}"
        names[here] = name
        for number, field in enumerate(message.field):
            names[(*here, _FIELD, number)] = f"{name}.{field.name}"
        names |= _messages(name, (*here, _NESTED), message.nested_type)
    return names


@cache
def comments() -> dict[str, str]:
    """Every commented message, field, service and method of the POS proto."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pos.pb"
        _protoc([f"--descriptor_set_out={out}", "--include_source_info", GATEWAY_PROTO])
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (proto,) = files.file
    names = _messages(proto.package, (_MESSAGE,), proto.message_type)
    for index, service in enumerate(proto.service):
        name = f"{proto.package}.{service.name}"
        names[(_SERVICE, index)] = name
        for number, method in enumerate(service.method):
            names[(_SERVICE, index, _METHOD, number)] = f"{name}.{method.name}"
    return {
        names[tuple(location.path)]: _text(location.leading_comments)
        for location in proto.source_code_info.location
        if tuple(location.path) in names and location.leading_comments.strip()
    }
