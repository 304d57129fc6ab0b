"""The layers of docs/architecture.md, checked on the imports of every module (issue 26 §1):
every SQL statement lives in store/, so the use cases (services/) and the wallet sender
(wallet/) import no database library and no table; domain/ imports only itself and the
standard library; store/ never imports a layer above it."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "loyalty_grpc"
DATABASE = ("sqlalchemy", "psycopg", "psycopg_pool", "alembic")
TABLES = "loyalty_grpc.store.tables"
ABOVE_STORE = ("loyalty_grpc.services", "loyalty_grpc.api", "loyalty_grpc.runtime")


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _imports(path: Path) -> Iterator[str]:
    """Every module `path` imports (absolute names; relative imports are not used here)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)


def _ids(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", _modules("services") + _modules("wallet"), ids=_ids)
def test_use_cases_run_no_sql_of_their_own(path: Path) -> None:
    found = sorted(name for name in set(_imports(path)) if _under(name, (*DATABASE, TABLES)))
    assert not found, f"{path.name} imports {found}: its statements belong in store/"


@pytest.mark.parametrize("path", _modules("domain"), ids=_ids)
def test_the_domain_imports_only_itself_and_the_standard_library(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        assert top in ("loyalty_grpc", "__future__") or top in sys.stdlib_module_names, name
        if top == "loyalty_grpc":
            assert _under(name, ("loyalty_grpc.domain",)), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", _modules("store"), ids=_ids)
def test_the_store_imports_no_layer_above_it(path: Path) -> None:
    found = sorted(name for name in set(_imports(path)) if _under(name, ABOVE_STORE))
    assert not found, f"{path.name} imports {found}"
