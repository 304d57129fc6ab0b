"""Every SQL text of store/ that writes or joins a program's rows names the program (issue
27: on a cluster sharded by `programa_id`, a statement that names it everywhere is routed to
one shard). Read off the texts the store modules hold at import, as they are sent (the hot
paths' statements are built from parts: store/ledger.py's CTEs, store/fan_lookup.py's
readings), not off their source; tests/integration/test_by_program.py checks the plans.

- Every INSERT into `movimientos`, `wallet_outbox`, `wallet_entregas`, `wallet_pases` and
  `limite_llamadas` lists `programa_id` among its columns; every one of the five is
  inserted into somewhere (so the check is not vacuous; `limite_llamadas` only by migration
  0015's function), and store/ writes them only with such texts (no SQLAlchemy `insert()`
  of them). The wallet sender's function bodies (migration 0016) are read too:
  store/wallet.py only calls them.
- Every JOIN of a program table (`fans`, `promos`, `codigos`, `ventas`, `movimientos`,
  `wallet_pases`) is on a condition that names `programa_id`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from sqlalchemy.sql.elements import TextClause

import loyalty_grpc.store

STORE = Path(loyalty_grpc.store.__file__).parent
ROWS_OF_A_FAN_OR_KEY = (
    "movimientos",
    "wallet_outbox",
    "wallet_entregas",
    "wallet_pases",
    "limite_llamadas",
)
PROGRAM_TABLES = ("fans", "promos", "codigos", "ventas", "movimientos", "wallet_pases")

_INSERT = re.compile(r"INSERT\s+INTO\s+(\w+)(?:\s+AS\s+\w+)?\s*\(([^)]*)\)", re.IGNORECASE)
# A join's condition runs to the next clause (another join, WHERE, a closing parenthesis).
_JOIN = re.compile(
    rf"\bJOIN\s+({'|'.join(PROGRAM_TABLES)})\b(?:\s+AS)?(?:\s+\w+)?\s+ON\s+(.*?)"
    r"(?=\bJOIN\b|\bLEFT\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\)|$)",
    re.IGNORECASE | re.DOTALL,
)


def _texts() -> dict[str, str]:
    """Every SQL text a store module holds at import, by name: module-level strings and
    TextClauses, and the values of module-level dicts of them (one statement per form)."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules([str(STORE)]):
        if info.ispkg:  # the migrations: frozen, the lead's
            continue
        module = importlib.import_module(f"loyalty_grpc.store.{info.name}")
        for name, value in vars(module).items():
            values = value.items() if isinstance(value, dict) else [(None, value)]
            for key, held in values:
                text = held.text if isinstance(held, TextClause) else held
                if isinstance(text, str) and re.search(r"\b(SELECT|INSERT|UPDATE)\b", text):
                    label = f"{info.name}.{name}" + ("" if key is None else f"[{key}]")
                    found[label] = text
    # The functions the store calls whose bodies write these rows (frozen in their
    # migrations): the wallet sender's (migration 0016).
    wallet = importlib.import_module(
        "loyalty_grpc.store.migrations.versions.0016_wallet_by_program"
    )
    for name in ("TURNO", "RECORD"):
        found[f"migration_0016.{name}"] = getattr(wallet, name)
    return found


# The hot paths' function bodies (migration 0014: the ledger rule, the sale, a redemption,
# the deposit), where their statements now are; checked like store/'s texts.
HOT_FUNCTIONS = "loyalty_grpc.store.migrations.versions.0014_hot_paths"


# Their leaner replacements (migration 0017: the one-fan ledger rule, and the three that
# call it).
LEAN_FUNCTIONS = "loyalty_grpc.store.migrations.versions.0017_hot_paths_lean"


def _function_texts() -> dict[str, str]:
    module = importlib.import_module(HOT_FUNCTIONS)
    lean = importlib.import_module(LEAN_FUNCTIONS)
    return {
        f"0014.{name}": getattr(module, name) for name in ("MOVE", "TX", "REDEEM", "DEPOSIT")
    } | {f"0017.{name}": getattr(lean, name) for name in ("MOVE1", "MOVE", "TX", "REDEEM")}


TEXTS = _texts() | _function_texts()


def test_the_texts_are_found() -> None:
    for name in (
        "sale.SALE",
        "redeem.REDEEM",
        "ledger.MOVE",
        "0014.MOVE",
        "0017.MOVE1",
        "migration_0016.TURNO",
    ):
        assert any(label.startswith(name) for label in TEXTS), name


@pytest.mark.parametrize("label", sorted(TEXTS))
def test_every_insert_into_a_fans_or_keys_rows_names_the_program(label: str) -> None:
    for table, columns in _INSERT.findall(TEXTS[label]):
        if table.lower() in ROWS_OF_A_FAN_OR_KEY:
            names = {c.strip().lower() for c in columns.split(",")}
            assert "programa_id" in names, f"{label}: INSERT INTO {table} ({columns.strip()})"


# Inserted only by a function's body (migration 0015, loyalty_limit_reserve: it lists
# `programa_id`; tests/citus/test_single_shard.py runs it on the key's shard).
INSERTED_BY_FUNCTIONS = frozenset({"limite_llamadas"})


def test_each_of_the_five_tables_is_inserted_into() -> None:
    inserted = {table.lower() for text in TEXTS.values() for table, _ in _INSERT.findall(text)}
    assert set(ROWS_OF_A_FAN_OR_KEY) - INSERTED_BY_FUNCTIONS <= inserted


@pytest.mark.parametrize("path", sorted(STORE.glob("*.py")), ids=lambda p: p.name)
def test_store_writes_them_only_as_those_texts(path: Path) -> None:
    """No SQLAlchemy `insert(<table>)` of the five: every insert is a text checked above."""
    source = path.read_text()
    for table in ROWS_OF_A_FAN_OR_KEY:
        assert not re.search(rf"\binsert\(\s*{table}\b", source), f"{path.name}: insert({table})"


@pytest.mark.parametrize("label", sorted(TEXTS))
def test_every_join_of_a_program_table_names_the_program(label: str) -> None:
    for table, condition in _JOIN.findall(TEXTS[label]):
        assert "programa_id" in condition, f"{label}: JOIN {table} ON {condition.strip()}"


def test_the_hot_paths_join_fans_on_the_program_and_pk() -> None:
    """The sale (and its replay), both redemptions and the resolve join fans on
    (programa_id, pk), and the ledger's balance UPDATE finds the fan by both."""
    joins = {
        label: _JOIN.findall(text)
        for label, text in TEXTS.items()
        if label.startswith(
            ("sale.", "redeem.REDEEM", "resolve.RESOLVE", "fan_lookup.LOOKUP", "0014.")
        )
    }
    fan_joins = [
        (label, cond) for label, found in joins.items() for table, cond in found if table == "fans"
    ]
    assert len(fan_joins) >= 4  # ORIGINAL, both redemptions, the text form's code reading
    for label, condition in fan_joins:
        assert re.search(r"\w+\.programa_id\s*=", condition), (label, condition)
        assert re.search(r"\w+\.pk\s*=", condition), (label, condition)
    for label, text in TEXTS.items():
        for update in re.findall(r"UPDATE\s+fans\b.*?RETURNING", text, re.DOTALL):
            assert re.search(r"\bf(ans)?\.programa_id = (%\(programa\)s|p_programa)", update), label
