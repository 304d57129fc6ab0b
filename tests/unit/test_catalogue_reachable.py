"""Every entry of the error catalogue (domain/errors.py) is one a caller can get: no codigo
is documented (README, the OpenAPI document, the proto's comments) that nothing sends.

Issue 23 §3 found `operacion_en_curso` in all three although nothing raised it (a call
while the same sale is being applied waits for it and answers `duplicado`). Two tests:

- each codigo is produced by the code: named in src/ (as `CodigoError.X`, outside the
  catalogue itself and the generated code) or in the gateway's Lua (outside its generated
  CATALOGO block: a refusal, a table mapping Envoy's statuses);
- each codigo is seen in a test against real parts: named in tests/e2e or
  tests/integration outside what a test's own fake server answers (a `*Servicer` class,
  `server_error(...)`), i.e. as an answer the test expects from the real server or
  gateway. Reading the tests' source, not running them: a codigo only a fake produces
  does not count.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from loyalty_grpc.domain.errors import CATALOGO, CodigoError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "loyalty_grpc"
# The catalogue, and the table of which operation answers which codigo (it names them, it
# raises none).
NOT_PRODUCERS = {SRC / "domain" / "errors.py", SRC / "api" / "operation_errors.py"}
GENERATED = SRC / "gen"
LUA = sorted((ROOT / "gateway").glob("*.lua"))
CATALOGUE_BLOCK = re.compile(r"-- BEGIN CATALOGO.*?-- END CATALOGO", re.S)
REAL_PART_TESTS = [ROOT / "tests" / "e2e", ROOT / "tests" / "integration"]
# What a test's fake server answers is not what the real parts send.
FAKE_ANSWERS = {"server_error"}
VALUES = {codigo.value: codigo for codigo in CodigoError}


class _Named(ast.NodeVisitor):
    """The codigos a module names: `CodigoError.X` (or an alias of CodigoError) and string
    constants equal to a codigo; with `skip_fakes`, not inside a `*Servicer` class nor a
    call of FAKE_ANSWERS."""

    def __init__(self, skip_fakes: bool) -> None:
        self.skip_fakes = skip_fakes
        self.found: set[CodigoError] = set()
        self.aliases = {"CodigoError"}

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "CodigoError":
            self.aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [ast.unparse(base) for base in node.bases]
        if self.skip_fakes and any(base.endswith("Servicer") for base in bases):
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = ast.unparse(node.func).rsplit(".", 1)[-1]
        if self.skip_fakes and name in FAKE_ANSWERS:
            return
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            member = CodigoError.__members__.get(node.attr)
            if member is not None:
                self.found.add(member)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in VALUES:
            self.found.add(VALUES[node.value])


def _python(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def named_in(paths: list[Path], *, skip_fakes: bool, exclude: set[Path]) -> set[CodigoError]:
    found: set[CodigoError] = set()
    for path in _python(paths):
        if path in exclude or GENERATED in path.parents:
            continue
        visitor = _Named(skip_fakes)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        found |= visitor.found
    return found


def named_in_lua() -> set[CodigoError]:
    found: set[CodigoError] = set()
    for path in LUA:
        text = CATALOGUE_BLOCK.sub("", path.read_text(encoding="utf-8"))
        found |= {VALUES[word] for word in re.findall(r'"(\w+)"', text) if word in VALUES}
    return found


def test_the_scan_sees_what_it_should() -> None:
    """The scan itself: it finds a refusal of the server, one of the gateway, and ignores
    a fake server's answer and the catalogue's own definition."""
    assert CodigoError.IMPORTE_INVALIDO in produced_by_the_code()
    assert CodigoError.TIEMPO_AGOTADO in named_in_lua()
    fake = _Named(skip_fakes=True)
    fake.visit(
        ast.parse(
            "class Pos(pb.PosServiceServicer):\n"
            "    def Tx(self, r, c):\n"
            "        c.abort_with_status(server_error(CodigoError.FAN_NO_ENCONTRADO, ''))\n"
            "x = server_error(CodigoError.CODIGO_LIBERADO, '')\n"
            "assert_error(r, CodigoError.CODIGO_NO_ASIGNADO)\n"
        )
    )
    assert fake.found == {CodigoError.CODIGO_NO_ASIGNADO}


@functools.cache
def produced_by_the_code() -> set[CodigoError]:
    return named_in([SRC], skip_fakes=False, exclude=NOT_PRODUCERS) | named_in_lua()


@functools.cache
def seen_in_tests() -> set[CodigoError]:
    return named_in(REAL_PART_TESTS, skip_fakes=True, exclude=set())


@pytest.mark.parametrize("codigo", list(CodigoError), ids=str)
def test_every_codigo_is_produced_by_the_code(codigo: CodigoError) -> None:
    produced = produced_by_the_code()
    assert codigo in produced, (
        f"{codigo.value} is in the catalogue but nothing in src/ or gateway/*.lua sends it: "
        "remove it (catalogue, proto comments, generated docs) or raise it"
    )


@pytest.mark.parametrize("codigo", list(CodigoError), ids=str)
def test_every_codigo_is_seen_in_a_test_of_the_real_parts(codigo: CodigoError) -> None:
    seen = seen_in_tests()
    where = "the back office's tests" if CATALOGO[codigo].interno else "an e2e test"
    assert codigo in seen, (
        f"no test of tests/e2e or tests/integration expects {codigo.value} from the real "
        f"parts: add one ({where})"
    )
