"""Request ids of the back office's writes that are not idempotent by nature (AIP-155):
`AdjustPoints` (a retry would credit twice) and `AssignNextCode` (a retry would deliver a
second code). Pure, no I/O.

A caller that may retry a write sends a `request_id` of its choosing, the same on every
attempt (`loyalty admin` sends a new UUID per command and keeps it through its retries).
The first call with it is applied; a later one with the same id and the same request gets
the first one's answer again, changing nothing; one with the same id and a different
request is refused (request_id_en_conflicto) — the guarantee `tx` gives with `id_externo`
(services/backoffice/requests.py, store/requests.py). Without a request id the call is
applied each time, as before.

Not `IssueKey`: its answer holds the key's secret, which is stored only as a hash, so it
cannot be answered again; a retried IssueKey leaves a second key whose secret nobody saw,
found by ListKeys and revoked (docs/cli.md, "Request ids").
"""

from __future__ import annotations

import re

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

MAX_REQUEST_ID = 64
# Letters, digits and `.`, `_`, `:`, `-` (a UUID, a ULID, a caller's own scheme), starting
# with a letter or digit.
_REQUEST_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_REQUEST_ID - 1}}}")


def request_id(text: str) -> str | None:
    """The request id of a call (None: not given), or solicitud_invalida."""
    if text == "":
        return None
    if _REQUEST_ID.fullmatch(text) is None:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"request_id {shown(text)}: se esperan de 1 a {MAX_REQUEST_ID} letras, dígitos, "
            "'.', '_', ':' o '-', empezando por letra o dígito (un UUID sirve)",
        )
    return text
