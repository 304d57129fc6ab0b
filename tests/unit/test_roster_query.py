"""api/roster.py: what a POST /api/v1/roster body asks for. A number in `desde` is never a
cursor: it reaches the cursor check as its text (an integer value without `.0`), so the
service answers cursor_invalido naming what arrived, never an internal error."""

from __future__ import annotations

import math

import pytest
from google.protobuf import struct_pb2

from loyalty_grpc.api.roster import query_of_post
from loyalty_grpc.domain.roster import LIMITE_DEFAULT
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb


@pytest.mark.parametrize(
    ("number", "text"),
    [(5, "5"), (5.0, "5"), (1.5e2, "150"), (5.5, "5.5"), (math.inf, "inf"), (-math.inf, "-inf")],
)
def test_a_number_in_desde_is_its_text(number: float, text: str) -> None:
    request = pb.RosterPostRequest(desde=struct_pb2.Value(number_value=number))
    query = query_of_post(request)
    assert (query.desde, query.limite) == (text, LIMITE_DEFAULT)
