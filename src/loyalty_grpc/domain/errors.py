"""The error catalogue (DESIGN.md §2): the one table of every `error.codigo`.

The gRPC interceptor, Envoy's local replies (checked by a test), docs/errors.md and the tests
all read this table; nobody repeats it. Its `cuando` texts quote the limits from the modules
that own them; those modules raise these errors (they import this one), so `CATALOGO` is
built when first read, once they are loaded (`_catalogue`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from loyalty_grpc.domain.detalle import bounded
from loyalty_grpc.domain.secret_strength import MIN_BITS


class CodigoError(StrEnum):
    SOLICITUD_INVALIDA = "solicitud_invalida"
    CAMPO_REQUERIDO = "campo_requerido"
    IMPORTE_INVALIDO = "importe_invalido"
    TS_INVALIDO = "ts_invalido"
    DEMASIADOS_CODIGOS = "demasiados_codigos"
    CODIGO_INVALIDO = "codigo_invalido"
    CURSOR_INVALIDO = "cursor_invalido"
    MONEDA_NO_SOPORTADA = "moneda_no_soportada"
    NO_AUTENTICADO = "no_autenticado"
    CLAVE_INVALIDA = "clave_invalida"
    PERMISO_DENEGADO = "permiso_denegado"
    FAN_NO_ENCONTRADO = "fan_no_encontrado"
    CODIGO_NO_ENCONTRADO = "codigo_no_encontrado"
    PROMO_NO_ENCONTRADA = "promo_no_encontrada"
    RUTA_NO_ENCONTRADA = "ruta_no_encontrada"
    METODO_NO_PERMITIDO = "metodo_no_permitido"
    TIEMPO_AGOTADO = "tiempo_agotado"
    CODIGO_LIBERADO = "codigo_liberado"
    CODIGO_NO_ASIGNADO = "codigo_no_asignado"
    PROMO_NO_ADMITE_CODIGOS = "promo_no_admite_codigos"
    SOLICITUD_MUY_GRANDE = "solicitud_muy_grande"
    ID_EXTERNO_EN_CONFLICTO = "id_externo_en_conflicto"
    DEMASIADAS_LLAMADAS = "demasiadas_llamadas"
    ERROR_INTERNO = "error_interno"
    NO_IMPLEMENTADO = "no_implementado"
    SERVICIO_NO_DISPONIBLE = "servicio_no_disponible"
    # Back office (internal gRPC only; the HTTP status is what the code would mean over HTTP).
    FIXTURE_INVALIDO = "fixture_invalido"
    PERMISO_DESCONOCIDO = "permiso_desconocido"
    CLAVE_MAL_FORMADA = "clave_mal_formada"
    PROGRAMA_NO_ENCONTRADO = "programa_no_encontrado"
    CLAVE_NO_ENCONTRADA = "clave_no_encontrada"
    VENTA_NO_ENCONTRADA = "venta_no_encontrada"
    FAN_DUPLICADO = "fan_duplicado"
    CORREO_DUPLICADO = "correo_duplicado"
    QR_DUPLICADO = "qr_duplicado"
    PROMO_DUPLICADA = "promo_duplicada"
    TRANSICION_INVALIDA = "transicion_invalida"
    REQUEST_ID_EN_CONFLICTO = "request_id_en_conflicto"


@dataclass(frozen=True)
class Entry:
    """One row of the catalogue. `grpc` is a grpc.StatusCode name (the domain does not
    import grpc; the edge resolves the name)."""

    codigo: CodigoError
    http: int
    grpc: str
    mensaje: str
    cuando: str
    # True when only the back office produces it (not part of the HTTP API).
    interno: bool = False


def _e(
    codigo: CodigoError, http: int, grpc: str, mensaje: str, cuando: str, *, interno: bool = False
) -> Entry:
    return Entry(codigo, http, grpc, mensaje, cuando, interno)


C = CodigoError

CATALOGO: dict[CodigoError, Entry]
"""Every code's row: built on first read (`__getattr__`, `_catalogue`)."""


def __getattr__(name: str) -> dict[CodigoError, Entry]:
    """`CATALOGO`, built once on first read (PEP 562: the modules it quotes import this
    one)."""
    if name == "CATALOGO":
        return _catalogue()
    raise AttributeError(f"module {__name__} has no attribute {name}")


@functools.cache
def _catalogue() -> dict[CodigoError, Entry]:
    from loyalty_grpc.domain import codes, keys, programs, rate_limit, redeem, timestamps

    ts_hours = timestamps.MAX_ADELANTO // timedelta(hours=1)
    too_many = (
        f"more than {redeem.MAX_CODIGOS} in `redeem`, more than {codes.MAX_CODES_PER_CALL} "
        "in `codes`"
    )
    length = codes.MAX_CODE_LENGTH
    code = (
        f"a deposited code is empty, over {length} chars, has control characters or "
        f"characters other than ASCII; a code to redeem over {length} chars"
    )
    moneda = programs.MONEDA_POR_OMISION
    calls = rate_limit.DEFAULT_CALLS_PER_MINUTE
    vivo, prueba = keys.PREFIJOS[keys.Modo.VIVO], keys.PREFIJOS[keys.Modo.PRUEBA]
    key = (
        f"a key without the `{vivo}`/`{prueba}` prefix and {keys.MIN_SECRET_LENGTH}+ letters "
        "or digits"
    )
    return {
        e.codigo: e
        for e in [
            _e(
                C.SOLICITUD_INVALIDA,
                400,
                "INVALID_ARGUMENT",
                "La solicitud no es válida.",
                "body not strict JSON (RFC 8259) or not one object, a key twice, wrong JSON type, "
                "Content-Type not application/json, bad parameter (detalle names the field or the "
                "line and column, never the body)",
            ),
            _e(
                C.CAMPO_REQUERIDO,
                400,
                "INVALID_ARGUMENT",
                "Falta un campo requerido.",
                "a required field is missing (detalle names it)",
            ),
            _e(
                C.IMPORTE_INVALIDO,
                400,
                "INVALID_ARGUMENT",
                "El importe no es válido.",
                "amount unreadable, negative, more than 2 decimals, too large",
            ),
            _e(
                C.TS_INVALIDO,
                400,
                "INVALID_ARGUMENT",
                "La fecha y hora no es válida.",
                f"timestamp unreadable or more than {ts_hours} h in the future",
            ),
            _e(
                C.DEMASIADOS_CODIGOS,
                400,
                "INVALID_ARGUMENT",
                "Demasiados códigos en una llamada.",
                too_many,
            ),
            _e(
                C.CODIGO_INVALIDO,
                400,
                "INVALID_ARGUMENT",
                "Un código no es válido.",
                code,
            ),
            _e(
                C.CURSOR_INVALIDO,
                400,
                "INVALID_ARGUMENT",
                "El cursor no es válido.",
                "`desde` is not a cursor this database issued for this program (altered, "
                "another program's or database's, of the previous format, issued after "
                "the point a backup was restored to, or, on Citus, before the program's "
                "data moved to another node): start again without `desde`",
            ),
            _e(
                C.MONEDA_NO_SOPORTADA,
                400,
                "INVALID_ARGUMENT",
                "La moneda no está soportada.",
                f"`moneda` other than the program's currency ({moneda})",
            ),
            _e(
                C.NO_AUTENTICADO,
                401,
                "UNAUTHENTICATED",
                "Falta la clave de API.",
                "no or malformed `Authorization: Bearer` header",
            ),
            _e(
                C.CLAVE_INVALIDA,
                401,
                "UNAUTHENTICATED",
                "La clave de API no es válida.",
                "unknown or revoked key",
            ),
            _e(
                C.PERMISO_DENEGADO,
                403,
                "PERMISSION_DENIED",
                "La clave no tiene permiso para esto.",
                "the key lacks the endpoint's permission",
            ),
            _e(
                C.FAN_NO_ENCONTRADO,
                404,
                "NOT_FOUND",
                "No se encontró al fan.",
                "no fan matches (also a fan in `baja`)",
            ),
            _e(
                C.CODIGO_NO_ENCONTRADO,
                404,
                "NOT_FOUND",
                "No se encontró el código.",
                "`redeem` of a code the program does not have",
            ),
            _e(
                C.PROMO_NO_ENCONTRADA,
                404,
                "NOT_FOUND",
                "No se encontró la promoción.",
                "`codes` names no promotion of the program",
            ),
            _e(
                C.RUTA_NO_ENCONTRADA,
                404,
                "NOT_FOUND",
                "La ruta no existe.",
                "unknown path (Envoy); `detalle` suggests the real path when the one sent is "
                "close to it (a typo, the case, another version)",
            ),
            _e(
                C.METODO_NO_PERMITIDO,
                405,
                "UNIMPLEMENTED",
                "El método no se admite en esta ruta.",
                "a known path with a method it does not take (HEAD and OPTIONS included); "
                "`Allow` lists the path's methods, `detalle` names the one to use (Envoy)",
            ),
            _e(
                C.TIEMPO_AGOTADO,
                408,
                "DEADLINE_EXCEEDED",
                "La solicitud no llegó a tiempo.",
                "the request did not arrive whole in time: headers within 10 s, headers and body "
                "within 30 s, no pause of 20 s (Envoy); nothing was done, safe to send again",
            ),
            _e(
                C.CODIGO_LIBERADO,
                409,
                "FAILED_PRECONDITION",
                "El código fue liberado.",
                "`redeem` of a code in state `liberado`",
            ),
            _e(
                C.CODIGO_NO_ASIGNADO,
                409,
                "FAILED_PRECONDITION",
                "El código no está asignado.",
                "`redeem` of a code in state `disponible`",
            ),
            _e(
                C.PROMO_NO_ADMITE_CODIGOS,
                409,
                "FAILED_PRECONDITION",
                "La promoción no admite códigos.",
                "`codes` into a `terminada` promotion",
            ),
            _e(
                C.SOLICITUD_MUY_GRANDE,
                413,
                "INVALID_ARGUMENT",
                "La solicitud es demasiado grande.",
                "body over its operation's limit, refused from Content-Length or while it is read "
                "(bytes: tx 12288, fan/resolve 8192, redeem 73728, codes 704512, POST ping and "
                "roster 4096; api/edge_limits.py), an object of more than 64 members or a list of "
                "more elements than the operation takes, request headers over Envoy's limit "
                "(detalle names the operation or the headers, and the limit); also headers over "
                "the server's metadata limit, which is above Envoy's",
            ),
            _e(
                C.ID_EXTERNO_EN_CONFLICTO,
                422,
                "FAILED_PRECONDITION",
                "El id_externo ya se usó con otros datos.",
                "known `id_externo` with a different fan or amount",
            ),
            _e(
                C.DEMASIADAS_LLAMADAS,
                429,
                "RESOURCE_EXHAUSTED",
                "Demasiadas llamadas.",
                f"over {calls} calls in a minute for the key, or a key not known to work from a "
                "client "
                "address with too many failed key checks that minute "
                "(`LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE`); `Retry-After` set",
            ),
            _e(
                C.ERROR_INTERNO,
                500,
                "INTERNAL",
                "Error interno.",
                "a bug; no internals in `mensaje`",
            ),
            _e(
                C.NO_IMPLEMENTADO,
                501,
                "UNIMPLEMENTED",
                "Operación aún no disponible.",
                "a method the server does not have (e.g. a gateway newer than the server)",
            ),
            _e(
                C.SERVICIO_NO_DISPONIBLE,
                503,
                "UNAVAILABLE",
                "Servicio no disponible.",
                "database or server unreachable; safe to retry",
            ),
            _e(
                C.FIXTURE_INVALIDO,
                400,
                "INVALID_ARGUMENT",
                "El fixture no es válido.",
                "`apply` of a fixture that fails validation (detalle names entry and field)",
                interno=True,
            ),
            _e(
                C.PERMISO_DESCONOCIDO,
                400,
                "INVALID_ARGUMENT",
                "Permiso desconocido.",
                "a key is given a permission name that does not exist",
                interno=True,
            ),
            _e(
                C.CLAVE_MAL_FORMADA,
                400,
                "INVALID_ARGUMENT",
                "La clave no tiene un formato válido.",
                f"{key}, or a fixture's new key whose secret part is too weak "
                "(domain/secret_strength.py: "
                f"a documented example, or an entropy estimate under {MIN_BITS} bits)",
                interno=True,
            ),
            _e(
                C.PROGRAMA_NO_ENCONTRADO,
                404,
                "NOT_FOUND",
                "No se encontró el programa.",
                "back office names an unknown program",
                interno=True,
            ),
            _e(
                C.CLAVE_NO_ENCONTRADA,
                404,
                "NOT_FOUND",
                "No se encontró la clave.",
                "back office names an unknown key id",
                interno=True,
            ),
            _e(
                C.VENTA_NO_ENCONTRADA,
                404,
                "NOT_FOUND",
                "No se encontró la venta.",
                "back office names a sale folio the program does not have",
                interno=True,
            ),
            _e(
                C.FAN_DUPLICADO,
                409,
                "ALREADY_EXISTS",
                "Ya existe un fan con ese id.",
                "registering a Fan ID the program already has",
                interno=True,
            ),
            _e(
                C.CORREO_DUPLICADO,
                409,
                "ALREADY_EXISTS",
                "Ya existe un fan con ese correo.",
                "two fans of a program with the same e-mail (case-insensitive)",
                interno=True,
            ),
            _e(
                C.QR_DUPLICADO,
                409,
                "ALREADY_EXISTS",
                "Ya existe un fan con ese token QR.",
                "two fans of a program with the same QR token",
                interno=True,
            ),
            _e(
                C.PROMO_DUPLICADA,
                409,
                "ALREADY_EXISTS",
                "Ya existe una promoción con ese nombre.",
                "two promotions of a program with the same name (case-insensitive)",
                interno=True,
            ),
            _e(
                C.TRANSICION_INVALIDA,
                409,
                "FAILED_PRECONDITION",
                "El cambio de estado no es válido.",
                "a back-office state change the current state does not allow",
                interno=True,
            ),
            _e(
                C.REQUEST_ID_EN_CONFLICTO,
                422,
                "FAILED_PRECONDITION",
                "El request_id ya se usó con otros datos.",
                "a back-office write's known `request_id` with a different request "
                "(domain/requests.py)",
                interno=True,
            ),
        ]
    }


class LoyaltyError(Exception):
    """A failure the client can act on. `detalle` helps the person debugging: name the
    field and the value's problem, never a secret or personal data; a client's value only
    through domain.detalle.shown. It is kept within domain.detalle.MAX_DETALLE characters
    (`bounded`): every detalle the edge sends has been through here."""

    def __init__(
        self, codigo: CodigoError, detalle: str = "", *, retry_after: int | None = None
    ) -> None:
        detalle = bounded(detalle)
        super().__init__(f"{codigo}: {detalle}" if detalle else str(codigo))
        self.codigo = codigo
        self.detalle = detalle
        # Whole seconds after which a retry may succeed (demasiadas_llamadas): the edge
        # sends it as google.rpc.RetryInfo and `Retry-After`.
        self.retry_after = retry_after

    @property
    def entry(self) -> Entry:
        return _catalogue()[self.codigo]
