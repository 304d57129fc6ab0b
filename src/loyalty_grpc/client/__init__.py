"""A typed Python client of loyalty.v1.PosService for internal services (README "Native
gRPC clients"): `PosClient` (client/pos.py) with the retry rules of README "Retrying
calls" (client/retry.py) and one exception type, `LoyaltyCallError` (client/errors.py)."""

from loyalty_grpc.client.errors import LoyaltyCallError
from loyalty_grpc.client.pos import PosClient
from loyalty_grpc.client.retry import RetryPolicy

__all__ = ["LoyaltyCallError", "PosClient", "RetryPolicy"]
