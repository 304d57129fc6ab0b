"""What the gateway's edge lets through, worked out once from the domain's limits: the
body each HTTP binding of the POS API may have (bytes), how many members an object and
how many elements a list of a JSON body may have, how deep it may nest, and the bounds of
the gateway's memory of keys and client addresses. Pure figures and texts, no I/O.

Every copy is generated from here: scripts/gen_edge.py writes the binding routes of
gateway/envoy.yaml (the buffer filter's limit of each route) and the EDGE block of
gateway/envelope.lua (the Content-Length check, the 413 detalle, the table sizes);
scripts/gen_request_check.py writes each route's parse limits into
gateway/request_check.lua. The catalogue's `solicitud_muy_grande` entry and
docs/security.md quote the figures (tests/unit/test_edge_limits.py ties them).

The arithmetic (`worst_case`): a body carries each field of its request message once (an
alias is the same field: the server refuses two of a group), at its largest value:

- a free text (`fan`, `id_externo`, `terminal`, `ts` as text...): every character written
  as the longest JSON text of one character, ESCAPED_CHAR bytes: a character outside the
  Basic Multilingual Plane (an emoji) as an `ensure_ascii` encoder writes it, a surrogate
  pair of `\\uXXXX` escapes (raw UTF-8 takes at most 4 bytes). The domain counts
  characters, so every body whose fields are within their maxima fits, whatever the
  characters and the encoder (the OpenAPI document promises as much: schemathesis sends
  such bodies);
- an identifier that is ASCII by rule (a coupon code; a roster cursor): ESCAPED_ASCII
  bytes per character, the longest escape a JSON encoder uses for printable ASCII (`\\/`
  from PHP, `\\"`, `\\\\`);
- a number: NUMBER bytes (a double printed in full is at most 24);
- per member: MEMBER bytes for its name in quotes, the colon, the comma and a
  pretty-printer's line break and indentation; per list element: ELEMENT bytes for the
  quotes, the comma, a line break and 8 spaces of indentation;

and the sum is rounded up to whole pages of PAGE bytes, never below FLOOR. FLOOR is also
the least the buffer filter may be given on any route: its limit is the stream's buffer
limit, which envelope.lua's rewrite of an error body into the envelope (at most ~2 KB:
detalle is cut to 300 bytes, each at most a 6-byte escape) must fit under, or Envoy
answers a bare 500. A binding without a body (a GET) reads none (Content-Length > 0 is
refused from the headers); a chunked body sent anyway is cut at FLOOR.

What does not fit: a code of characters an encoder escapes as `\\u00XX` (Go escapes `<`,
`>`, `&` so) at every position of 5,000 codes; whitespace beyond a pretty-printer's; and
unknown fields beyond the rounding (they count too, and the server ignores them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain import amounts, timestamps
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.promos import MAX_NOMBRE
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.domain.roster_cursor import CURSOR_LENGTH

ESCAPED_CHAR: Final = 12
ESCAPED_ASCII: Final = 2
NUMBER: Final = 32
MEMBER: Final = 32
ELEMENT: Final = 12
PAGE: Final = 4096
FLOOR: Final = 4096

# `moneda`: the one value accepted is the program's three-letter code (domain/programs.py;
# any other value, of any length, is moneda_no_soportada), with room for spaces around it.
MAX_MONEDA: Final = 8

# The parse limits of request_check.lua. The largest request message (RegisterTxRequest)
# has 17 fields and none is an object: MAX_MEMBERS leaves room for unknown fields, which
# the transcoder ignores. A list is only ever a list of codes (`codigos`): a route's lists
# may have as many elements as its codes (`max_elements`), others MAX_MEMBERS. The deepest
# request is 2 levels (the body, a list of codes); MAX_DEPTH leaves room for the wrong JSON
# types a server explains with the field's own code (an object for `importe`...).
MAX_MEMBERS: Final = 64
MAX_DEPTH: Final = 8

# The gateway's memory (gateway/envelope.lua, per Envoy worker thread): keys seen working
# (a hash of each) and client addresses the server blocked. Each table holds at most
# twice its size (two generations: when the newer one is full it becomes the older and
# the older one is dropped), so memory stays bounded whatever an attacker sends.
KNOWN_KEYS: Final = 4096
KNOWN_KEY_SECONDS: Final = 3600
BLOCKED_ADDRESSES: Final = 4096
MAX_BLOCK_SECONDS: Final = 3600


@dataclass(frozen=True)
class Field:
    """A member of the worst-case body: `chars` characters at `per_char` bytes each, or a
    number (`chars` 0), or a list of `elements` identifiers of `chars` characters."""

    name: str
    chars: int = 0
    per_char: int = ESCAPED_CHAR
    elements: int = 0

    @property
    def bytes(self) -> int:
        if self.elements:
            return self.elements * (self.chars * self.per_char + ELEMENT)
        if self.chars:
            return self.chars * self.per_char + 2  # and its quotes
        return NUMBER


def text(name: str, chars: int) -> Field:
    return Field(name, chars)


def number(name: str) -> Field:
    return Field(name)


def codes(name: str, count: int) -> Field:
    return Field(name, MAX_CODE_LENGTH, ESCAPED_ASCII, count)


@dataclass(frozen=True)
class Binding:
    """One HTTP binding of the POS API: its worst-case body (no fields: no body at all,
    unless `body` says it takes one) and the most elements a list of it may have."""

    fields: tuple[Field, ...] = ()
    body: bool = True
    max_elements: int = MAX_MEMBERS
    # The fields that carry codes: a list of them over `max_elements` is
    # demasiados_codigos, as the server answers (domain.codes.too_many_codes).
    codes_fields: tuple[str, ...] = ()

    def worst_case(self) -> int:
        """Bytes of the largest body a client may send here."""
        if not self.body:
            return 0
        return 2 + sum(field.bytes + MEMBER for field in self.fields)

    @property
    def limit(self) -> int:
        """The body limit: the worst case in whole pages, at least FLOOR (0 without body)."""
        if not self.body:
            return 0
        pages = -(-self.worst_case() // PAGE)
        return max(FLOOR, pages * PAGE)

    @property
    def buffer_limit(self) -> int:
        """What the buffer filter is given on this route (it cannot be below FLOOR)."""
        return max(FLOOR, self.limit)


# Every binding of proto/loyalty/v1/pos_service.proto (scripts/gen_edge.py refuses a
# binding missing here, or an entry without a binding).
BINDINGS: Mapping[str, Binding] = {
    "POST /api/v1/tx": Binding(
        (
            text("id_externo", MAX_ID_EXTERNO),
            text("fan", MAX_FAN_TEXT),
            text("importe", amounts.MAX_TEXTO),
            number("importe_centavos"),  # may come with importe when they agree
            text("terminal", MAX_LABEL),
            text("sitio", MAX_LABEL),
            text("ts", timestamps.MAX_TEXTO),
            text("moneda", MAX_MONEDA),
        )
    ),
    "POST /api/v1/fan/resolve": Binding((text("fan", MAX_FAN_TEXT),)),
    "POST /api/v1/redeem": Binding(
        (
            codes("codigos", MAX_CODIGOS),
            text("terminal", MAX_LABEL),
            text("ts", timestamps.MAX_TEXTO),
        ),
        max_elements=MAX_CODIGOS,
        codes_fields=("codigos",),
    ),
    "POST /api/v1/codes": Binding(
        (text("promo", MAX_NOMBRE), codes("codigos", MAX_CODES_PER_CALL)),
        max_elements=MAX_CODES_PER_CALL,
        codes_fields=("codigos", "codes"),
    ),
    # PingRequest has no field: `{}` is what clients send; FLOOR is the least a body
    # limit can be (see the module's docstring).
    "POST /api/v1/ping": Binding(),
    "POST /api/v1/roster": Binding(
        (Field("desde", CURSOR_LENGTH, ESCAPED_ASCII), number("limite"))
    ),
    "GET /api/v1/ping": Binding(body=False),
    "GET /api/v1/promos": Binding(body=False),
    "GET /api/v1/roster": Binding(body=False),
}


# ---------------------------------------------------------------- the refusals' texts


def too_large(binding: str) -> str:
    """detalle of a body over its binding's limit (413), or of a body sent to a binding
    that takes none (400 when Content-Length says so, 413 when a chunked one passes FLOOR)."""
    limits = BINDINGS[binding]
    if not limits.body:
        return no_body(binding)
    return f"{binding}: el cuerpo pasa de {limits.limit} bytes, lo más que admite esta operación"


def no_body(binding: str) -> str:
    return f"{binding}: no lleva cuerpo; sus parámetros van en la URL"


# A body over FLOOR on a route that is not a binding (the OpenAPI document, a 404).
TOO_LARGE_ELSEWHERE: Final = f"cuerpo: pasa de {FLOOR} bytes, lo más que admite esta ruta"
# Envoy's limit on a request's headers (the HTTP connection manager's
# max_request_headers_kb in gateway/envoy.yaml; tests/unit/test_gateway_config.py ties the
# two): over it, HTTP/1.1 gets 431 (the envelope: 413 with this detalle); HTTP/2 gets its
# stream reset, which carries no text.
MAX_REQUEST_HEADERS_KB: Final = 60
TOO_LARGE_HEADERS: Final = (
    f"cabeceras: pasan de {MAX_REQUEST_HEADERS_KB} KiB, lo más que admite la pasarela"
)
# The hint of a 404 (envelope.lua): computed only for a path of at most MAX_HINT_PATH
# characters, among the served paths within MAX_HINT_DISTANCE edits (insert, delete or
# change a character) of what was sent, so that its work stays bounded.
MAX_HINT_PATH: Final = 200
MAX_HINT_DISTANCE: Final = 2
# A body whose Content-Type is not JSON (request_check.lua), or any /api/v1/ call labelled
# as gRPC (envelope.lua: the native-gRPC route would otherwise answer it).
CONTENT_TYPE_JSON: Final = "Content-Type: debe ser application/json"


def methods_by_path() -> dict[str, tuple[str, ...]]:
    """Each binding's path -> the methods it takes, in alphabetical order (what `Allow`
    lists on a 405)."""
    found: dict[str, list[str]] = {}
    for key in BINDINGS:
        verb, path = key.split(" ")
        found.setdefault(path, []).append(verb)
    return {path: tuple(sorted(verbs)) for path, verbs in sorted(found.items())}


def wrong_method(path: str, methods: tuple[str, ...]) -> str:
    """The start of the detalle of a 405 (metodo_no_permitido): the gateway adds the
    method that came (", no con PUT")."""
    return f"{path} se llama con {' o '.join(methods)}"


def too_many_members(binding: str) -> str:
    return f"cuerpo: un objeto con más de {MAX_MEMBERS} campos ({binding})"


def too_many_elements(binding: str) -> str:
    """The `%s` is the field (or `cuerpo`) whose list it is."""
    return f"%s: una lista con más de {BINDINGS[binding].max_elements} elementos ({binding})"


__all__ = [
    "BINDINGS",
    "BLOCKED_ADDRESSES",
    "CONTENT_TYPE_JSON",
    "FLOOR",
    "KNOWN_KEYS",
    "KNOWN_KEY_SECONDS",
    "MAX_BLOCK_SECONDS",
    "MAX_DEPTH",
    "MAX_HINT_DISTANCE",
    "MAX_HINT_PATH",
    "MAX_MEMBERS",
    "MAX_REQUEST_HEADERS_KB",
    "TOO_LARGE_ELSEWHERE",
    "TOO_LARGE_HEADERS",
    "Binding",
    "Field",
    "methods_by_path",
    "no_body",
    "too_large",
    "too_many_elements",
    "too_many_members",
    "wrong_method",
]
