"""The names the gateway (gateway/envoy.yaml, gateway/envelope.lua) and the server agree on.
Plain constants without imports, so that the gateway's side (runtime/gateway/checks.py,
which checks every Envoy configuration it renders for the mark) does not load grpc.

- The gateway mark: Envoy sets the request header `x-loyalty-gateway: 1` on every request
  it forwards to the server (`request_headers_to_add` of the whole route table, with
  `append_action: OVERWRITE_IF_EXISTS_OR_ADD`: a value a client sent is replaced, and a
  client cannot remove it). The server reads it when a call fails, and on the two
  successful answers that have typed fields for native callers (fan/resolve, a batch
  redeem: filled only without the mark; api/native_fields.py).
- The error metadata for envelope.lua: a failed call that carries the mark gets, besides
  the real gRPC status and its `google.rpc.ErrorInfo`, the trailing metadata
  `x-http-status` (the catalogue's HTTP status) and `x-envelope` (the complete envelope
  JSON, ASCII-escaped because metadata must be ASCII). A native gRPC caller (no mark) does
  not get them: they are the gateway's, not part of the gRPC API.

- The client's address: Envoy sets `x-loyalty-client-address` (the TCP peer's IP, or the
  address found in `X-Forwarded-For` when the operator configured trusted proxies) on
  every request it forwards, overwriting what a client sent, as it sets the mark. The
  server reads it only on calls that carry the mark; a native caller is its gRPC peer.
- The address verdict: when the server refuses a call because its client address has
  failed too many key checks (429 demasiadas_llamadas), the call's trailing metadata also
  carries `x-loyalty-address-blocked` with the seconds until the address may try unknown
  keys again (gateway-marked calls only). The gateway remembers it and refuses, from the
  headers alone, calls from that address whose key it has not seen work, until then.
  envelope.lua never lets it reach a client.

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
CLIENT_ADDRESS_KEY: Final = "x-loyalty-client-address"
ADDRESS_BLOCKED_KEY: Final = "x-loyalty-address-blocked"

__all__ = [
    "ADDRESS_BLOCKED_KEY",
    "CLIENT_ADDRESS_KEY",
    "ENVELOPE_KEY",
    "GATEWAY_MARK_KEY",
    "GATEWAY_MARK_VALUE",
    "HTTP_STATUS_KEY",
]
