"""A back-office write applied once per request id (domain/requests.py): the rule, in the
write's own unit of work. The answer is kept as the caller gives it (bytes: the serialized
response), so a retry gets exactly the first answer."""

from __future__ import annotations

from collections.abc import Callable

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.store import requests as requests_store
from loyalty_grpc.store.requests import RequestKey
from loyalty_grpc.store.uow import UnitOfWork


def once(
    uow: UnitOfWork, key: RequestKey, huella: bytes, write: Callable[[UnitOfWork], bytes]
) -> bytes:
    """`write(uow)`'s answer, applied once per `key`: a request with a known key and the same
    `huella` (the request's SHA-256) gets the first answer and changes nothing; a
    different request under that key is request_id_en_conflicto."""
    earlier = requests_store.claim(uow.conn, key, huella)
    if earlier is None:
        respuesta = write(uow)
        requests_store.answer(uow.conn, key, respuesta)
        return respuesta
    if earlier.huella != huella:
        # Whole (a UUID is longer than `shown` keeps): checked to letters, digits and
        # `._:-` (domain/requests.py), the caller needs it to find its mistake.
        raise LoyaltyError(
            CodigoError.REQUEST_ID_EN_CONFLICTO,
            f'request_id "{key.request_id}" ya se usó en {key.metodo} con otros datos; '
            "un reintento envía la misma solicitud, una solicitud nueva lleva un request_id nuevo",
        )
    return earlier.respuesta
