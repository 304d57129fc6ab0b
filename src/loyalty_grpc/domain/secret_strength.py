"""When a secret is strong enough to be accepted where it is created: the back-office
admin token (LOYALTY_ADMIN_TOKEN / LOYALTY_ADMIN_TOKEN_FILE, checked by
runtime/settings.py; the one `loyalty up` generates passes by construction) and the
secret part of an API key that a fixture brings (the characters after `lp_vivo_` /
`lp_prueba_`: domain/keys.py `require_strong`, for keys not stored yet). Keys the back
office issues are generated (`keys.new_key`) and pass. Pure, no I/O.

The rule, in this order (the first that fails is the reason):

1. at least MIN_LENGTH characters;
2. not a documented example (PLACEHOLDERS, compared ignoring ASCII case): a value
   copied from loyalty.env.example or the documentation is public, however long;
3. an entropy estimate of at least MIN_BITS: the sum over its characters of
   log2(length / occurrences of that character), i.e. what the text would carry if each
   character were drawn independently with the frequencies it has. 24 characters spread
   evenly over 8 different ones give 72 bits; one character repeated gives 0; `Z9Z9…`
   one bit per character.

It catches placeholders, padding with one character and tiny alphabets; it does not see
order (`abcdefgh…` or a word passes), so it is a floor, not a proof: generate secrets
(`secrets.token_urlsafe(32)`, `loyalty admin keys issue`). Random ones pass with a wide
margin: 32 hex digits (`secrets.token_hex(16)`) estimate 116 ± 4 bits, a generated key
(32 of 62 letters and digits) 145 ± 4, the token `loyalty up` generates 208 ± 5.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

MIN_LENGTH = 24
MIN_BITS = 72

# Documented examples that must never become secrets (compared ignoring ASCII case):
# loyalty.env.example's admin token, and the key the tour (docs/tour.md) shows as one that does
# not exist (its secret part). tests/unit/test_secret_strength.py reads them from those
# files, so a changed example cannot slip past.
PLACEHOLDERS = frozenset(
    {
        "change-me-to-a-long-random-token",
        "noexisteestaclave0000000000",
    }
)


class Weakness(StrEnum):
    TOO_SHORT = "too_short"
    PLACEHOLDER = "placeholder"
    PREDICTABLE = "predictable"


@dataclass(frozen=True)
class Verdict:
    """Why a secret is refused, with the figures a message needs (never the secret)."""

    weakness: Weakness
    length: int
    bits: float


def entropy_bits(secret: str) -> float:
    """The estimate of the rule: sum over characters of log2(len / count)."""
    length = len(secret)
    return sum(count * math.log2(length / count) for count in Counter(secret).values())


def weakness(secret: str) -> Verdict | None:
    """None when `secret` is strong enough, else why not."""
    length = len(secret)
    bits = entropy_bits(secret)
    if length < MIN_LENGTH:
        found = Weakness.TOO_SHORT
    elif secret.lower() in PLACEHOLDERS:
        found = Weakness.PLACEHOLDER
    elif bits < MIN_BITS:
        found = Weakness.PREDICTABLE
    else:
        return None
    return Verdict(found, length, bits)


def reason(verdict: Verdict) -> str:
    """One line for an operator (settings messages are English), without the secret."""
    if verdict.weakness is Weakness.TOO_SHORT:
        return f"at least {MIN_LENGTH} characters (it has {verdict.length})"
    if verdict.weakness is Weakness.PLACEHOLDER:
        return "a random secret, not the documented example value"
    return (
        f"less predictable: its characters carry about {verdict.bits:.0f} bits, at least "
        f"{MIN_BITS} are needed (too many repeated characters or too few different ones)"
    )


def motivo(verdict: Verdict) -> str:
    """The same reason in Spanish, for an error's detalle (never the secret)."""
    if verdict.weakness is Weakness.TOO_SHORT:
        return f"debe tener al menos {MIN_LENGTH} caracteres (tiene {verdict.length})"
    if verdict.weakness is Weakness.PLACEHOLDER:
        return "es el ejemplo publicado en la documentación, no un secreto"
    return (
        f"es demasiado predecible: sus caracteres dan unos {verdict.bits:.0f} bits y se "
        f"piden {MIN_BITS} (demasiados caracteres repetidos o muy pocos distintos)"
    )
