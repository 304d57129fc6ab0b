"""Generate the CATALOGO block of gateway/envelope.lua (the envelopes the gateway builds
itself: Envoy's own replies, a gRPC error without one, the refusals of its edge and of
request_check.lua) from the error catalogue, src/loyalty_grpc/domain/errors.py.

    python scripts/gen_envelope.py           # rewrite the block in place
    python scripts/gen_envelope.py --check   # exit 1 when the block is stale

The block holds exactly the codigos the rest of envelope.lua names (its BY_HTTP_STATUS and
BY_GRPC_STATUS tables, its `codigo = "..."` fallbacks and its `refuse(handle, info, "...")`
refusals) and request_check.lua's CODIGO table, each with its HTTP status and mensaje
from the catalogue: a codigo the Lua uses that the catalogue lacks, or one that is
internal (never sent), stops the script.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from generated_block import main, replace_block

from loyalty_grpc.domain.errors import CATALOGO, CodigoError

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "gateway" / "envelope.lua"
REQUEST_CHECK = ROOT / "gateway" / "request_check.lua"
BEGIN = "-- BEGIN CATALOGO"
END = "-- END CATALOGO"
HEADER = (
    f"{BEGIN} (written by scripts/gen_envelope.py from src/loyalty_grpc/domain/errors.py; "
    "do not edit by hand)"
)


def _table(text: str, name: str, where: str = LUA.name) -> list[str]:
    found = re.search(rf"local {name} = \{{\n(.*?)\n\}}", text, re.DOTALL)
    if found is None:
        raise SystemExit(f"{where}: no table {name}")
    return re.findall(r'=\s*"(\w+)"', found.group(1))


def used_codigos(text: str) -> list[str]:
    """The codigos envelope.lua answers, outside the generated block, and those
    request_check.lua refuses with, in catalogue order."""
    rest = replace_block(text, BEGIN, END, "", LUA.name)
    request_check = REQUEST_CHECK.read_text(encoding="utf-8")
    used = {
        *_table(rest, "BY_HTTP_STATUS"),
        *_table(rest, "BY_GRPC_STATUS"),
        *re.findall(r'codigo = "(\w+)"', rest),
        *re.findall(r'refuse\(handle, info, "(\w+)"', rest),
        *_table(request_check, "CODIGO", REQUEST_CHECK.name),
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
    return replace_block(text, BEGIN, END, block(text), LUA.name)


if __name__ == "__main__":
    sys.exit(main(LUA, render, doc=__doc__ or "", what="CATALOGO", script="gen_envelope.py"))
