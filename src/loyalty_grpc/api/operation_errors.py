"""Which `error.codigo`s each PosService operation can answer: the one table the OpenAPI
document (scripts/gen_openapi.py: each operation's responses and their enums), the API
reference (docs/api.md) and the proto's rpc comments (a test) follow.

An operation's codigos are three parts:

- EDGE: what any call can get, whatever its operation, from the gateway
  (gateway/envelope.lua, gateway/request_check.lua) or the server's interceptors
  (api/authentication.py, api/call_limit.py, api/failures.py): a missing or unknown key,
  too many calls or failed key checks, a body or headers over the limits, a body that is
  not the strict JSON of the request message (or a NUL character), a request that did not
  arrive in time, a bug, a database or server away, a gateway newer than the server;
- permiso_denegado, for an operation that needs a permission (domain/permissions.py
  REQUIRED: derived, not repeated);
- OWN: what the operation's request parsers (api/requests.py, api/roster.py,
  api/codes.py, api/redeem.py and the domain rules they call) and its use case
  (services/pos/*.py) raise.

Not an operation's answer: ruta_no_encontrada (a path no operation has) and
metodo_no_permitido (a method the path does not take); the back office's entries
(`interno`) are not part of the HTTP API. Pure data: nothing on a call's path reads it.
"""

from __future__ import annotations

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.domain.permissions import REQUIRED

C = CodigoError

EDGE: frozenset[CodigoError] = frozenset(
    {
        C.SOLICITUD_INVALIDA,
        C.NO_AUTENTICADO,
        C.CLAVE_INVALIDA,
        C.TIEMPO_AGOTADO,
        C.SOLICITUD_MUY_GRANDE,
        C.DEMASIADAS_LLAMADAS,
        C.ERROR_INTERNO,
        C.NO_IMPLEMENTADO,
        C.SERVICIO_NO_DISPONIBLE,
    }
)

# A code over 64 characters (domain/redeem.check_length, domain/codes.check_new_code); a
# list of codes over the operation's maximum (also refused by the gateway while it reads).
_CODE_LISTS = {C.CODIGO_INVALIDO, C.DEMASIADOS_CODIGOS}

OWN: dict[str, frozenset[CodigoError]] = {
    "Ping": frozenset(),
    "PingGet": frozenset(),
    # fan (or an alias) missing; no fan matches, a QR URL without a token (domain/fan_ref).
    "ResolveFan": frozenset({C.CAMPO_REQUERIDO, C.FAN_NO_ENCONTRADO}),
    # id_externo, fan or importe missing; the amount (domain/amounts, services/pos/sales);
    # `ts` (domain/timestamps); the currency, the fan and the idempotency key
    # (services/pos/sales).
    "RegisterTx": frozenset(
        {
            C.CAMPO_REQUERIDO,
            C.IMPORTE_INVALIDO,
            C.TS_INVALIDO,
            C.MONEDA_NO_SOPORTADA,
            C.FAN_NO_ENCONTRADO,
            C.ID_EXTERNO_EN_CONFLICTO,
        }
    ),
    # codigo/codigos missing or empty; `ts`; the codes; the single form's outcomes
    # (domain/redeem: a batch reports each code's outcome inside `resultados`, not here).
    "Redeem": frozenset(
        {
            C.CAMPO_REQUERIDO,
            C.TS_INVALIDO,
            *_CODE_LISTS,
            C.CODIGO_NO_ENCONTRADO,
            C.CODIGO_LIBERADO,
            C.CODIGO_NO_ASIGNADO,
        }
    ),
    "ListPromos": frozenset(),
    # promo or codigos missing or empty; the codes (domain/codes); the promotion
    # (domain/codes.parse_promo_ref, services/pos/codes).
    "DepositCodes": frozenset(
        {
            C.CAMPO_REQUERIDO,
            *_CODE_LISTS,
            C.PROMO_NO_ENCONTRADA,
            C.PROMO_NO_ADMITE_CODIGOS,
        }
    ),
    # `desde` not a cursor of this program's feed (domain/roster_cursor,
    # services/pos/roster); `limite` is solicitud_invalida (domain/roster).
    "Roster": frozenset({C.CURSOR_INVALIDO}),
    "RosterPost": frozenset({C.CURSOR_INVALIDO}),
}

if OWN.keys() != REQUIRED.keys():  # (a new method must be given its row here)
    differ = sorted(OWN.keys() ^ REQUIRED.keys())
    raise RuntimeError(f"operation_errors.OWN and permissions.REQUIRED differ: {differ}")


def _codigos(method: str) -> frozenset[CodigoError]:
    permission = {C.PERMISO_DENEGADO} if REQUIRED[method] is not None else set()
    return EDGE | permission | OWN[method]


# PosService method name -> every codigo its calls can answer.
OPERATION_ERRORS: dict[str, frozenset[CodigoError]] = {method: _codigos(method) for method in OWN}

# Catalogue entries of the HTTP API that are no operation's answer (the route itself).
NOT_AN_OPERATIONS_ANSWER: frozenset[CodigoError] = frozenset(
    {C.RUTA_NO_ENCONTRADA, C.METODO_NO_PERMITIDO}
)
