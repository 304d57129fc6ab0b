"""Where the gRPC server listens unless told otherwise. Kept apart from api/server.py so
that runtime/settings.py, which does not import the server (grpc), states the same
defaults by importing these (its `LOYALTY_GRPC_HOST`/`LOYALTY_GRPC_PORT`, the gateway's
default upstream, the commands' help)."""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
