"""Generate the CATALOGO block of gateway/envelope.lua (the envelopes the gateway builds
itself: Envoy's own replies, a gRPC error without one) from the error catalogue,
src/loyalty_grpc/domain/errors.py.

    python scripts/gen_envelope.py           # rewrite the block in place
    python scripts/gen_envelope.py --check   # exit 1 when the block is stale

The block holds exactly the codigos the rest of envelope.lua names (its BY_HTTP_STATUS and
BY_GRPC_STATUS tables and its `codigo = "..."` fallbacks), each with its HTTP status and
mensaje from the catalogue: a codigo the Lua uses that the catalogue lacks, or one that is
internal (never sent), stops the script.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from loyalty_grpc.domain.errors import CATALOGO, CodigoError

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "gateway" / "envelope.lua"
BEGIN = "-- BEGIN CATALOGO"
END = "-- END CATALOGO"
HEADER = (
    f"{BEGIN} (written by scripts/gen_envelope.py from src/loyalty_grpc/domain/errors.py; "
    "do not edit by hand)"
)
_BLOCK = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)


def _table(text: str, name: str) -> list[str]:
    found = re.search(rf"local {name} = \{{\n(.*?)\n\}}", text, re.DOTALL)
    if found is None:
        raise SystemExit(f"{LUA.name}: no table {name}")
    return re.findall(r'=\s*"(\w+)"', found.group(1))


def used_codigos(text: str) -> list[str]:
    """The codigos envelope.lua answers, outside the generated block, in catalogue order."""
    rest = _BLOCK.sub("", text)
    used = {
        *_table(rest, "BY_HTTP_STATUS"),
        *_table(rest, "BY_GRPC_STATUS"),
        *re.findall(r'codigo = "(\w+)"', rest),
    }
    unknown = sorted(used - {codigo.value for codigo in CodigoError})
    if unknown:
        raise SystemExit(f"{LUA.name} names codigos the catalogue lacks: {', '.join(unknown)}")
    return [codigo.value for codigo in CodigoError if codigo.value in used]


def block(text: str) -> str:
    lines = [HEADER, "local CATALOGO = {"]
    for codigo in used_codigos(text):
        entrada = CATALOGO[CodigoError(codigo)]
        if entrada.interno:
            raise SystemExit(f"{LUA.name} answers {codigo}, which is internal (never sent)")
        if '"' in entrada.mensaje or "\\" in entrada.mensaje:
            raise SystemExit(f"{codigo}: its mensaje needs escaping in a Lua string")
        lines.append(f'  {codigo} = {{{entrada.http}, "{entrada.mensaje}"}},')
    lines += ["}", END]
    return "\n".join(lines)


def render(text: str) -> str:
    if not _BLOCK.search(text):
        raise SystemExit(f"{LUA.name} lacks the {BEGIN} ... {END} markers")
    fresh = block(text)
    return _BLOCK.sub(lambda _: fresh, text, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the block is stale")
    args = parser.parse_args()
    text = LUA.read_text(encoding="utf-8")
    fresh = render(text)
    if args.check:
        if fresh != text:
            print(f"{LUA.relative_to(ROOT)} is stale: run python scripts/gen_envelope.py")
            return 1
        print(f"{LUA.relative_to(ROOT)} is fresh")
        return 0
    LUA.write_text(fresh, encoding="utf-8")
    print(f"wrote the CATALOGO block of {LUA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
