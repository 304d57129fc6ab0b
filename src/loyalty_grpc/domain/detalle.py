"""What an error's `detalle` may hold (DESIGN.md §2 "Errors"): a bounded length, and a
client's value shown one way. Pure, no I/O.

- Every detalle is at most MAX_DETALLE characters: `LoyaltyError` (domain/errors.py)
  passes the one it is given through `bounded`, so nothing a message quotes can make the
  error's gRPC metadata large. The server sends the detalle three times (the status
  message, `google.rpc.ErrorInfo`, and `x-envelope` for the gateway), each at most a few
  KB even if every character had to be escaped; a detalle the size of a request field
  made Envoy's upstream headers overflow, which it took for a broken connection and
  retried (issue 22 §4). The gateway's own replies (`gateway/envelope.lua`) follow the
  same rules, with the figures scripts/gen_edge.py writes into it from here.
- A client's value, when a detalle shows it at all, goes through `shown`: JSON-quoted,
  every character outside printable ASCII escaped (`\\u0131`: a look-alike letter, a
  zero-width or a control character is visible as what it is), at most MAX_SHOWN
  characters of that escaped text, then `…` when the value was longer; a JSON number
  through `shown_number` (its shortest text, shortened the same way); a text too long to
  be read is not shown, its length is (`too_long`). Personal data (a Fan ID, an e-mail, a
  name) and secrets are never shown, shortened or not.
"""

from __future__ import annotations

import json
import re

MAX_DETALLE = 300
"""The longest detalle, in characters (a longer one keeps its start and its end)."""
MAX_SHOWN = 32
"""The longest client value a detalle shows: characters of its escaped text."""
ELLIPSIS = "…"

# Printable ASCII that JSON writes as itself (not `"` or `\`): shown without escaping.
_PLAIN = re.compile(r"[ !#-\[\]-~]*")
HEAD = MAX_DETALLE * 2 // 3
"""Of a longer detalle, the characters kept before the ellipsis; the rest comes from its
end, where the problem usually is ("programas[0]…fans[3].correo: falta el campo").
gateway/envelope.lua applies the same rule to the detalles it writes (MAX_DETALLE, HEAD,
MAX_SHOWN and ELLIPSIS written into it by scripts/gen_edge.py)."""


def shown(value: str, *, quote: bool = True) -> str:
    """`value` as a detalle may show it: `"HD-0001"`, `"hd-d\\u0131sp-0001"`,
    `"XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"…`; without the quotes when not `quote` (a label
    inside a path)."""
    if len(value) <= MAX_SHOWN and _PLAIN.fullmatch(value):
        text, cut = value, False
    else:
        text, cut = _escaped_prefix(value)
    quoted = f'"{text}"' if quote else text
    return quoted + ELLIPSIS if cut else quoted


def shown_number(value: float) -> str:
    """A client's JSON number as a detalle shows it: its shortest text (`repr`, what the
    client sent for any number of up to 15 significant digits), shortened like `shown`."""
    return shown(repr(value), quote=False)


def too_long(length: int, maximum: int) -> str:
    """What a detalle says of a client's text too long to be read: its length and the
    limit, never the text."""
    return f"texto demasiado largo ({length} caracteres; máximo {maximum})"


def _escaped_prefix(value: str) -> tuple[str, bool]:
    """The longest escaped prefix of `value` within MAX_SHOWN characters (never half an
    escape), and whether it is shorter than the value."""
    pieces: list[str] = []
    width = 0
    for char in value[: MAX_SHOWN + 1]:
        piece = json.dumps(char)[1:-1]  # ensure_ascii: \uXXXX, a surrogate pair, \n, \"
        if width + len(piece) > MAX_SHOWN:
            return "".join(pieces), True
        pieces.append(piece)
        width += len(piece)
    return "".join(pieces), len(value) > len(pieces)


def bounded(detalle: str) -> str:
    """`detalle` within MAX_DETALLE characters: a longer one keeps its first and last
    characters around an ellipsis."""
    if len(detalle) <= MAX_DETALLE:
        return detalle
    tail = MAX_DETALLE - HEAD - len(ELLIPSIS)
    return detalle[:HEAD] + ELLIPSIS + detalle[-tail:]


__all__ = [
    "ELLIPSIS",
    "HEAD",
    "MAX_DETALLE",
    "MAX_SHOWN",
    "bounded",
    "shown",
    "shown_number",
    "too_long",
]
