"""The names the gateway (gateway/envoy.yaml, gateway/envelope.lua) and the server agree on.
Plain constants without imports, so that the gateway's side (runtime/gateway/config.py,
which checks every Envoy configuration it renders for the mark) does not load grpc.

- The gateway mark: Envoy sets the request header `x-loyalty-gateway: 1` on every request
  it forwards to the server (`request_headers_to_add` of the whole route table, with
  `append_action: OVERWRITE_IF_EXISTS_OR_ADD`: a value a client sent is replaced, and a
  client cannot remove it). The server reads it only when a call fails.
- The error metadata for envelope.lua: a failed call that carries the mark gets, besides
  the real gRPC status and its `google.rpc.ErrorInfo`, the trailing metadata
  `x-http-status` (the catalogue's HTTP status) and `x-envelope` (the complete envelope
  JSON, ASCII-escaped because metadata must be ASCII). A native gRPC caller (no mark) does
  not get them: they are the gateway's, not part of the gRPC API.

The mark is not a credential: a native caller that sends it only gets the envelope
metadata too. What it guarantees is that every call through Envoy has it, whatever the
client sent.
"""

from __future__ import annotations

from typing import Final

GATEWAY_MARK_KEY: Final = "x-loyalty-gateway"
GATEWAY_MARK_VALUE: Final = "1"
HTTP_STATUS_KEY: Final = "x-http-status"
ENVELOPE_KEY: Final = "x-envelope"

__all__ = ["ENVELOPE_KEY", "GATEWAY_MARK_KEY", "GATEWAY_MARK_VALUE", "HTTP_STATUS_KEY"]
