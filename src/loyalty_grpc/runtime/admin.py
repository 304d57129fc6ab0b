"""`loyalty admin …`: the back-office operations, over gRPC to BackofficeService.

The admin token comes from LOYALTY_ADMIN_TOKEN or LOYALTY_ADMIN_TOKEN_FILE
(Settings.configured_admin_token), else from `<data dir>/admin_token` (which `loyalty up`
creates). Results print as readable lines (`--json`: the response message as
JSON); a failure prints one line `error: <codigo>: <detalle>` and exits with 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from loyalty_grpc.domain.codes import MAX_CODES_PER_CALL, code_batch, split_code_stream
from loyalty_grpc.domain.errors import Codigo, LoyaltyError
from loyalty_grpc.domain.promos import EstadoPromo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.admin_token import admin_token_path, read_admin_token
from loyalty_grpc.runtime.console import command
from loyalty_grpc.runtime.grpc_channel import open_channel
from loyalty_grpc.runtime.settings import Settings

DEFAULT_TIMEOUT_SECONDS = 60.0

Metadata = tuple[tuple[str, str], ...]
Stub = pb_grpc.BackofficeServiceStub
# One sub-command: (stub, parsed arguments, timeout, metadata) -> the response.
Call = Callable[[Stub, argparse.Namespace, float, Metadata], Message]


# ------------------------------------------------------------------ the command line


def add_admin_commands(parser: argparse.ArgumentParser) -> None:
    """Add the `admin` options and sub-commands to `parser`."""
    parser.add_argument(
        "--target",
        help="gRPC server HOST:PORT (env LOYALTY_GRPC_TARGET, default: where serve "
        "listens on this host)",
    )
    parser.add_argument(
        "--data-dir",
        help=f"where `{command('up')}` keeps admin_token (when LOYALTY_ADMIN_TOKEN is unset; "
        "env LOYALTY_DATA_DIR, default .loyalty)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        help="seconds to wait for the server",
    )
    parser.add_argument(
        "--json", action="store_true", default=False, help="print the response as JSON"
    )
    groups = parser.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    p = _command(groups, "apply", _apply, "apply a fixture file (DESIGN.md §4); '-' = stdin")
    p.add_argument("file")
    _program_commands(_group(groups, "programs", "loyalty programs"))
    _key_commands(_group(groups, "keys", "API keys"))
    _fan_commands(_group(groups, "fans", "fans"))
    _promo_commands(_group(groups, "promos", "promotions"))
    _code_commands(_group(groups, "codes", "coupon codes"))
    _points_commands(_group(groups, "points", "points (support desk)"))
    _sale_commands(_group(groups, "sales", "sales (support desk)"))


# argparse has no public name for the sub-command action.
_Sub = argparse._SubParsersAction

# `--json` also works after the sub-command: the leaves' copy sets it only when given
# (SUPPRESS), so it never resets the admin-level value.
_LEAF = argparse.ArgumentParser(add_help=False)
_LEAF.add_argument(
    "--json", action="store_true", default=argparse.SUPPRESS, help="print the response as JSON"
)


def _command(
    sub: _Sub[argparse.ArgumentParser], name: str, call: Call, help_text: str
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, parents=[_LEAF])
    parser.set_defaults(admin_call=call)
    return parser


def _program_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "upsert", _program_upsert, "create or change a program")
    p.add_argument("id")
    p.add_argument("--nombre", required=True)
    p.add_argument(
        "--tasa",
        "--tasa-puntos",
        dest="tasa",
        required=True,
        help="points per peso, exact decimal, e.g. 0.1",
    )
    p.add_argument("--qr-url", default="")
    p.add_argument("--moneda", default="")
    _command(sub, "list", _program_list, "list programs")


def _key_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "issue", _key_issue, "issue a key (its secret is shown once)")
    _programa(p)
    p.add_argument("--integracion", required=True)
    p.add_argument("--modo", choices=["vivo", "prueba"], default="vivo")
    p.add_argument(
        "--permisos", nargs="*", default=[], help="permission names, separated by spaces or commas"
    )
    p = _command(sub, "list", _key_list, "list a program's keys (never their secrets)")
    _programa(p)
    p = _command(sub, "revoke", _key_revoke, "revoke a key by id")
    p.add_argument("id", type=int)


def _fan_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "register", _fan_register, "register a fan")
    _programa(p, fan=True)
    p.add_argument("--nombre", required=True)
    p.add_argument("--correo", required=True)
    p.add_argument("--socio-desde", type=int, required=True)
    p.add_argument("--temporadas", type=int, default=0)
    p.add_argument("--qr-token", default="", help="generated when omitted")
    p = _command(sub, "update", _fan_update, "change the fields given")
    _programa(p, fan=True)
    p.add_argument("--nombre")
    p.add_argument("--correo")
    p.add_argument("--socio-desde", type=int)
    p.add_argument("--temporadas", type=int)
    p.add_argument("--qr-token")
    _programa(_command(sub, "get", _fan_get, "show a fan"), fan=True)
    p = _command(sub, "baja", _fan_baja, "activo -> baja, with a reason")
    _programa(p, fan=True)
    p.add_argument("--motivo", required=True)
    _programa(_command(sub, "reactivate", _fan_reactivate, "baja -> activo"), fan=True)
    _programa(
        _command(
            sub,
            "ledger",
            _fan_ledger,
            "a fan's points ledger, oldest first, with the running balance",
        ),
        fan=True,
    )


def _promo_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    estados = [estado.value for estado in EstadoPromo]
    p = _command(sub, "create", _promo_create, "create a promotion")
    _programa(p)
    p.add_argument("nombre")
    p.add_argument("--vigencia-fin", required=True, help="YYYY-MM-DD")
    p.add_argument("--descripcion", default="")
    p.add_argument("--estado", choices=estados, default="")
    p.add_argument("--puntos-canje", type=int, default=0)
    p = _command(sub, "update", _promo_update, "change the fields given")
    _programa(p)
    p.add_argument("id", type=int, help="promotion id")
    p.add_argument("--estado", choices=estados)
    p.add_argument("--vigencia-fin", help="YYYY-MM-DD")
    p.add_argument("--puntos-canje", type=int)
    p.add_argument("--descripcion")


def _code_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "assign", _code_assign, "deliver a code to a fan: disponible -> asignado")
    _programa(p)
    p.add_argument("--promo", type=int, required=True, help="promotion id")
    p.add_argument("codigo")
    p.add_argument("--fan", required=True, help="Fan ID")
    p = _command(
        sub,
        "release",
        _code_release,
        "take a code out of circulation: disponible/asignado -> liberado",
    )
    _programa(p)
    p.add_argument("--promo", type=int, required=True, help="promotion id")
    p.add_argument("codigo")
    p = _command(sub, "next", _code_next, "deliver the promotion's oldest disponible code to a fan")
    _programa(p)
    p.add_argument("--promo", type=_int_bits(32), required=True, help="promotion id")
    p.add_argument("--fan", required=True, help="Fan ID")
    p = _command(
        sub,
        "import",
        _code_import,
        "deposit the codes of a file ('-' = stdin), split like pasted text, in "
        f"calls of {MAX_CODES_PER_CALL}; run it again to resume (idempotent)",
    )
    _programa(p)
    p.add_argument("promo", type=_int_bits(32), help="promotion id")
    p.add_argument("file")


def _points_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(
        sub,
        "adjust",
        _points_adjust,
        "a manual adjustment: --puntos 100 credits, --puntos -50 debits",
    )
    _programa(p, fan=True)
    # A negative number is a value here, not an option (argparse: no option looks like one).
    p.add_argument("--puntos", type=_int_bits(64), required=True, help="points, + credit, - debit")
    p.add_argument("--motivo", required=True, help="why (kept in the ledger entry)")


def _sale_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "void", _sale_void, "void a sale: takes back the points it credited, once")
    _programa(p)
    p.add_argument("folio", type=_int_bits(32), help="the sale's folio (`tx` in the POS response)")
    p.add_argument("--motivo", required=True, help="why (kept in the reversing entry)")


def _int_bits(bits: int) -> Callable[[str], int]:
    """An argparse type: an integer that fits the proto field (signed, `bits` wide)."""
    limit = 2 ** (bits - 1)

    def parse(text: str) -> int:
        value = int(text)
        if not -limit <= value < limit:
            raise argparse.ArgumentTypeError(f"{text}: fuera de rango")
        return value

    parse.__name__ = "int"  # argparse says "invalid int value: ..."
    return parse


def _group(
    groups: _Sub[argparse.ArgumentParser], name: str, help_text: str
) -> _Sub[argparse.ArgumentParser]:
    parser = groups.add_parser(name, help=help_text)
    return parser.add_subparsers(dest="admin_action", required=True, metavar="ACTION")


def _programa(parser: argparse.ArgumentParser, *, fan: bool = False) -> None:
    parser.add_argument("--programa", "-p", required=True, help="program id")
    if fan:
        parser.add_argument("id", help="Fan ID")


# ------------------------------------------------------------------ running


def run_admin(args: argparse.Namespace, settings: Settings) -> int:
    """Run the parsed `admin` command; 0 on success, 1 on an error (printed as one line)."""
    settings = settings.with_flags(data_dir=args.data_dir)  # checked like LOYALTY_DATA_DIR
    token = settings.configured_admin_token() or read_admin_token(settings.data_dir)
    if not token:
        return _fail(
            Codigo.NO_AUTENTICADO.value,
            "falta el token de administración: LOYALTY_ADMIN_TOKEN, LOYALTY_ADMIN_TOKEN_FILE o "
            f"{admin_token_path(settings.data_dir)}",
        )
    call: Call = args.admin_call
    metadata = (("authorization", f"Bearer {token}"),)
    try:
        with open_channel(args.target or settings.server_target, settings.grpc_tls()) as channel:
            response = call(pb_grpc.BackofficeServiceStub(channel), args, args.timeout, metadata)
    except grpc.RpcError as exc:
        return _fail(*error_of(exc))
    except CommandStoppedError as exc:
        return _fail(exc.codigo, exc.detalle)
    except OSError as exc:  # reading the fixture file
        return _fail(Codigo.SOLICITUD_INVALIDA.value, str(exc))
    if args.json:
        sys.stdout.write(
            json.dumps(
                json_format.MessageToDict(
                    response,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                ),
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
    else:
        sys.stdout.write("".join(line + "\n" for line in render(response)))
    return 0


def _fail(codigo: str, detalle: str) -> int:
    """One line on stderr, the same shape for every failure; exit status 1."""
    sys.stderr.write(f"error: {codigo}: {' '.join(detalle.split())}\n")
    return 1


_TRANSPORT: dict[grpc.StatusCode, Codigo] = {
    grpc.StatusCode.UNAVAILABLE: Codigo.SERVICIO_NO_DISPONIBLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: Codigo.SERVICIO_NO_DISPONIBLE,
    grpc.StatusCode.UNAUTHENTICATED: Codigo.NO_AUTENTICADO,
    grpc.StatusCode.UNIMPLEMENTED: Codigo.NO_IMPLEMENTADO,
}


def error_of(exc: grpc.RpcError) -> tuple[str, str]:
    """(codigo, detalle) of a failed call: the codigo is google.rpc.ErrorInfo's reason;
    without one (the server was never reached…) it follows the gRPC status code."""
    # A stub's RpcError is also a grpc.Call (code, details, trailing metadata).
    call: grpc.Call = exc  # type: ignore[assignment]
    detalle = call.details() or call.code().name
    status = rpc_status.from_call(call)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info.reason, detalle
    return _TRANSPORT.get(call.code(), Codigo.ERROR_INTERNO).value, detalle


# ------------------------------------------------------------------ readable output


def render(message: Message) -> list[str]:
    """Readable lines: each record on one line of `campo=valor` (empty text left out);
    lists one record per line; the response's own fields (`creado`, the secret of a new
    key) on a line each. A ledger: the fan's line, then a table of its entries."""
    if isinstance(message, pb.GetLedgerResponse):
        return [_record(message.fan), *ledger_table(message.entries)]
    lines: list[str] = []
    for descriptor in message.DESCRIPTOR.fields:
        value = getattr(message, descriptor.name)
        if descriptor.message_type is None:
            lines.append(f"{descriptor.name}: {_text(value)}")
        elif descriptor.is_repeated:
            lines.extend(_record(item) for item in value)
        elif message.HasField(descriptor.name):
            lines.append(_record(value))
    if isinstance(message, pb.IssueKeyResponse):
        lines.append("(la clave se muestra solo esta vez; guárdala ahora)")
    if not lines:
        lines.append("(nada)")
    return lines


LEDGER_COLUMNS = ("fecha (UTC)", "motivo", "puntos", "venta", "código", "saldo", "nota")


def ledger_table(entries: Iterable[pb.LedgerEntry]) -> list[str]:
    """The ledger as an aligned table, one entry a line, oldest first; numbers right-aligned,
    credits with `+`."""
    rows = [
        (
            e.creado.replace("T", " ").removesuffix("Z")[:19],
            e.motivo,
            f"{e.puntos:+d}",
            str(e.venta) if e.venta else "",
            e.codigo,
            str(e.saldo),
            " ".join(e.nota.split()),
        )
        for e in entries
    ]
    if not rows:
        return ["(sin movimientos)"]
    widths = [max(len(r[i]) for r in [LEDGER_COLUMNS, *rows]) for i in range(len(LEDGER_COLUMNS))]
    numeric = {2, 3, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(LEDGER_COLUMNS), *(line(r) for r in rows)]


def _record(message: Message) -> str:
    """`campo=valor` for every field; empty text and empty lists are left out (numbers and
    booleans always show, 0 included)."""
    pairs = ((d.name, getattr(message, d.name)) for d in message.DESCRIPTOR.fields)
    return "  ".join(
        f"{name}={_text(value)}"
        for name, value in pairs
        if not (isinstance(value, str) or hasattr(value, "__len__")) or len(value) > 0
    )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "sí" if value else "no"
    if isinstance(value, str):
        return (
            value
            if value and not any(c.isspace() for c in value)
            else json.dumps(value, ensure_ascii=False)
        )
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)


# ------------------------------------------------------------------ the calls


def _apply(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    text = sys.stdin.read() if a.file == "-" else Path(a.file).read_text(encoding="utf-8")
    return stub.ApplyFixture(pb.ApplyFixtureRequest(fixture_json=text), timeout=t, metadata=md)


def _program_upsert(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    program = pb.Program(
        id=a.id, nombre=a.nombre, tasa_puntos=a.tasa, qr_url=a.qr_url, moneda=a.moneda
    )
    return stub.UpsertProgram(pb.UpsertProgramRequest(program=program), timeout=t, metadata=md)


def _program_list(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ListPrograms(pb.ListProgramsRequest(), timeout=t, metadata=md)


def _key_issue(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    permisos = [n for item in a.permisos for n in item.replace(",", " ").split()]
    return stub.IssueKey(
        pb.IssueKeyRequest(
            programa=a.programa, integracion=a.integracion, modo=a.modo, permisos=permisos
        ),
        timeout=t,
        metadata=md,
    )


def _key_list(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ListKeys(pb.ListKeysRequest(programa=a.programa), timeout=t, metadata=md)


def _key_revoke(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.RevokeKey(pb.RevokeKeyRequest(id=a.id), timeout=t, metadata=md)


def _fan_register(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.RegisterFan(
        pb.RegisterFanRequest(
            programa=a.programa,
            id=a.id,
            nombre=a.nombre,
            correo=a.correo,
            socio_desde=a.socio_desde,
            temporadas=a.temporadas,
            qr_token=a.qr_token,
        ),
        timeout=t,
        metadata=md,
    )


def _given(a: argparse.Namespace, *names: str) -> dict[str, object]:
    """The optional fields the user gave (so that only those change)."""
    return {n: getattr(a, n) for n in names if getattr(a, n) is not None}


def _fan_update(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    fields = _given(a, "nombre", "correo", "socio_desde", "temporadas", "qr_token")
    return stub.UpdateFan(
        pb.UpdateFanRequest(programa=a.programa, id=a.id, **fields),  # type: ignore[arg-type]
        timeout=t,
        metadata=md,
    )


def _fan_get(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.GetFan(pb.GetFanRequest(programa=a.programa, id=a.id), timeout=t, metadata=md)


def _fan_baja(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.DeactivateFan(
        pb.DeactivateFanRequest(programa=a.programa, id=a.id, motivo=a.motivo),
        timeout=t,
        metadata=md,
    )


def _fan_reactivate(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ReactivateFan(
        pb.ReactivateFanRequest(programa=a.programa, id=a.id), timeout=t, metadata=md
    )


def _promo_create(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.CreatePromo(
        pb.CreatePromoRequest(
            programa=a.programa,
            nombre=a.nombre,
            descripcion=a.descripcion,
            estado=a.estado,
            vigencia_fin=a.vigencia_fin,
            puntos_canje=a.puntos_canje,
        ),
        timeout=t,
        metadata=md,
    )


def _promo_update(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    fields = _given(a, "estado", "vigencia_fin", "puntos_canje", "descripcion")
    return stub.UpdatePromo(
        pb.UpdatePromoRequest(programa=a.programa, id=a.id, **fields),  # type: ignore[arg-type]
        timeout=t,
        metadata=md,
    )


def _code_assign(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.AssignCode(
        pb.AssignCodeRequest(programa=a.programa, promo_id=a.promo, codigo=a.codigo, fan=a.fan),
        timeout=t,
        metadata=md,
    )


def _code_release(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.ReleaseCode(
        pb.ReleaseCodeRequest(programa=a.programa, promo_id=a.promo, codigo=a.codigo),
        timeout=t,
        metadata=md,
    )


def _fan_ledger(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.GetLedger(
        pb.GetLedgerRequest(programa=a.programa, fan=a.id), timeout=t, metadata=md
    )


def _points_adjust(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.AdjustPoints(
        pb.AdjustPointsRequest(programa=a.programa, fan=a.id, puntos=a.puntos, motivo=a.motivo),
        timeout=t,
        metadata=md,
    )


def _sale_void(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.VoidSale(
        pb.VoidSaleRequest(programa=a.programa, folio=a.folio, motivo=a.motivo),
        timeout=t,
        metadata=md,
    )


def _code_next(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    return stub.AssignNextCode(
        pb.AssignNextCodeRequest(programa=a.programa, promo_id=a.promo, fan=a.fan),
        timeout=t,
        metadata=md,
    )


# ------------------------------------------------------------------ codes import


class CommandStoppedError(Exception):
    """A command of many calls failed part-way; `detalle` says what is already done."""

    def __init__(self, codigo: str, detalle: str) -> None:
        super().__init__(f"{codigo}: {detalle}")
        self.codigo = codigo
        self.detalle = detalle


READ_CHARS = 64 * 1024
# Without a terminal, one progress line every this many calls (and one at the end).
PROGRESS_EVERY_CALLS = 10


def _text_chunks(source: TextIO) -> Iterator[str]:
    """The file's text in pieces of READ_CHARS, a leading byte-order mark dropped."""
    first = True
    while chunk := source.read(READ_CHARS):
        if first:
            chunk, first = chunk.removeprefix("\ufeff"), False
        yield chunk


class _ImportProgress:
    """Codes read, added and already present, and the rate, on stderr: rewritten in
    place on a terminal, else one line every PROGRESS_EVERY_CALLS calls."""

    def __init__(self) -> None:
        self.leidos = self.recibidos = self.agregados = self.duplicados = self.calls = 0
        self._started = time.monotonic()
        self._tty = sys.stderr.isatty()
        self._open_line = False
        self._ended = False

    def add(self, leidos: int, response: pb.ImportCodesResponse) -> None:
        self.leidos += leidos
        self.recibidos += response.recibidos
        self.agregados += response.agregados
        self.duplicados += response.duplicados
        self.calls += 1
        if self._tty or self.calls % PROGRESS_EVERY_CALLS == 0:
            self.show()

    def line(self) -> str:
        rate = self.leidos / max(time.monotonic() - self._started, 1e-9)
        return (
            f"leídos {self.leidos}  agregados {self.agregados}  "
            f"duplicados {self.duplicados}  ({rate:,.0f} códigos/s)"
        )

    def show(self) -> None:
        if self._tty:
            sys.stderr.write("\r" + self.line() + "\x1b[K")
            self._open_line = True
        else:
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        """Close the in-place line (or print the last line) before anything else; once."""
        if self._ended:
            return
        self._ended = True
        if self._tty and self._open_line:
            sys.stderr.write("\n")
        elif not self._tty and self.calls % PROGRESS_EVERY_CALLS != 0:
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def summary(self) -> str:
        return (
            f"los {self.leidos} códigos leídos antes ya quedaron guardados (agregados "
            f"{self.agregados}, duplicados {self.duplicados}); vuelva a ejecutar el "
            "comando para continuar"
        )

    def stopped(self, codigo: str, detalle: str, first: int) -> CommandStoppedError:
        """The one-line error of a call that failed, saying what was saved before it."""
        return CommandStoppedError(
            codigo,
            (
                f"{detalle} — se detuvo en el bloque {self.calls + 1} (códigos desde el "
                f"{first + 1} del archivo); {self.summary()}"
            ),
        )


def _code_import(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    """Streams the file: reads it in pieces, splits it like pasted text and deposits
    MAX_CODES_PER_CALL codes per call, never holding the whole file. Each call commits
    on its own and deposits are idempotent, so running the command again resumes."""
    progress = _ImportProgress()
    source: TextIO = sys.stdin if a.file == "-" else Path(a.file).open(encoding="utf-8")  # noqa: SIM115 (closed below)
    pieces = split_code_stream(_text_chunks(source))

    def send(codigos: tuple[str, ...]) -> pb.ImportCodesResponse:
        return stub.ImportCodes(
            pb.ImportCodesRequest(programa=a.programa, promo_id=a.promo, codigos=codigos),
            timeout=t,
            metadata=md,
        )

    try:
        while _import_next_chunk(send, pieces, progress):
            pass
    except KeyboardInterrupt:
        progress.end()
        sys.stderr.write(f"interrumpido: {progress.summary()}\n")
        raise SystemExit(130) from None
    finally:
        progress.end()
        if source is not sys.stdin:
            source.close()
    return pb.ImportCodesResponse(
        recibidos=progress.recibidos, agregados=progress.agregados, duplicados=progress.duplicados
    )


def _import_next_chunk(
    send: Callable[[tuple[str, ...]], pb.ImportCodesResponse],
    pieces: Iterator[str],
    progress: _ImportProgress,
) -> bool:
    """Deposit the next MAX_CODES_PER_CALL codes of the file; False at its end."""
    first = progress.leidos
    try:
        chunk = list(islice(pieces, MAX_CODES_PER_CALL))
    except UnicodeDecodeError as exc:
        raise progress.stopped(
            Codigo.SOLICITUD_INVALIDA.value, f"el archivo no es UTF-8 ({exc.reason})", first
        ) from None
    if not chunk:
        return False
    try:
        # The server applies the same rules; checking here names a bad code by its place in
        # the file and sends nothing that would fail.
        response = send(code_batch(chunk, "archivo", pasted=True, start=first).codigos)
    except LoyaltyError as exc:
        raise progress.stopped(exc.codigo.value, exc.detalle, first) from None
    except grpc.RpcError as exc:
        raise progress.stopped(*error_of(exc), first) from None
    progress.add(len(chunk), response)
    return True
