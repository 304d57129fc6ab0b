"""The states of fans, promotions and codes are the enums' (domain/promos.py): the store's
statements take them from there (f-strings of `EstadoCodigo.ASIGNADO.value`...), never typed
as SQL literals, so renaming a state cannot leave a statement looking for the old word."""

from __future__ import annotations

import re
from pathlib import Path

from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo

STORE = Path(__file__).resolve().parents[2] / "src" / "loyalty_grpc" / "store"
WORDS = {state.value for enum in (EstadoCodigo, EstadoFan, EstadoPromo) for state in enum}
# Not yet derived (issue 26 §3 left them: the table definitions are being moved by another
# change); the migrations are history and keep their words.
KNOWN = {"tables.py": 3}


def typed_states(path: Path) -> list[str]:
    """The state words written as SQL literals ('asignado') in a module's text."""
    return [w for w in re.findall(r"'([a-z_]+)'", path.read_text()) if w in WORDS]


def test_the_store_takes_state_words_from_the_enums() -> None:
    found = {
        path.name: typed
        for path in sorted(STORE.glob("*.py"))
        if (typed := typed_states(path)) and len(typed) > KNOWN.get(path.name, 0)
    }
    assert found == {}, "state words typed into SQL; use the enums' values"


def test_the_check_finds_a_typed_state(tmp_path: Path) -> None:
    module = tmp_path / "lookup.py"
    module.write_text("SQL = \"SELECT 1 FROM fans WHERE estado = 'activo'\"\n")
    assert typed_states(module) == ["activo"]
