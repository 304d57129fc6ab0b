"""Case changes of identifiers (Fan IDs, coupon codes, e-mails, currency codes): ASCII
letters only. Pure, no I/O.

Python's `str.upper()`/`str.lower()` (and PostgreSQL's `lower()` under a UTF-8 collation)
fold some other letters into ASCII ones: `ı` (dotless i) → `I`, `ſ` (long s) → `S`, `K`
(Kelvin sign) → `k`, `İ` → `i̇`. An identifier compared after such a fold reaches another
one (`hd-dısp-0001` redeemed `HD-DISP-0001`; issue 22 §5). Here only `a`–`z`/`A`–`Z`
change; every other character is kept as it is, so a value with a look-alike stays
different from every ASCII identifier. The store's side of the e-mail rule is
`lower(correo COLLATE "C")`, which is the same ASCII-only fold (store/tables.py).
"""

from __future__ import annotations

import string

_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def ascii_upper(text: str) -> str:
    """`text` with its ASCII letters in upper case, every other character unchanged."""
    return text.upper() if text.isascii() else text.translate(_UPPER)


def ascii_lower(text: str) -> str:
    """`text` with its ASCII letters in lower case, every other character unchanged."""
    return text.lower() if text.isascii() else text.translate(_LOWER)


__all__ = ["ascii_lower", "ascii_upper"]
