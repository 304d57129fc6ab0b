"""`loyalty serve`: the gRPC server alone (the database must exist and be migrated)."""

from __future__ import annotations

import logging

from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.runtime import wallet
from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.signals import stop_event

log = logging.getLogger(__name__)


def serve(settings: ServerSettings) -> int:
    wallet_settings = wallet.load_settings()
    stop = stop_event()
    server = build_server(settings)
    server.start()
    sender = wallet.start_sender(server.engine, wallet_settings)
    say(f"gRPC: {settings.host}:{server.port}")
    stop.wait()
    log.info("stopping")
    sender.stop()
    server.stop()
    return 0
