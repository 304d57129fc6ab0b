"""The `loyalty admin` command line: its options and sub-commands, each bound to its call."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from loyalty_grpc.domain.codes import MAX_CODES_PER_CALL
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.promos import EstadoPromo
from loyalty_grpc.runtime.cli.admin.calls import (
    DEFAULT_TIMEOUT_SECONDS,
    Call,
    adjust_points,
    apply,
    assign_code,
    assign_next_code,
    create_promo,
    deactivate_fan,
    get_fan,
    get_ledger,
    issue_key,
    list_keys,
    list_programs,
    reactivate_fan,
    register_fan,
    release_code,
    revoke_key,
    update_fan,
    update_promo,
    upsert_program,
    void_sale,
)
from loyalty_grpc.runtime.cli.admin.code_import import import_codes
from loyalty_grpc.runtime.console import command


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
    p = _command(groups, "apply", apply, "apply a fixture file (DESIGN.md §4); '-' = stdin")
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
    p = _command(sub, "upsert", upsert_program, "create or change a program")
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
    _command(sub, "list", list_programs, "list programs")


def _key_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "issue", issue_key, "issue a key (its secret is shown once)")
    _programa(p)
    p.add_argument("--integracion", required=True)
    p.add_argument("--modo", choices=[modo.value for modo in Modo], default=Modo.VIVO.value)
    p.add_argument(
        "--permisos", nargs="*", default=[], help="permission names, separated by spaces or commas"
    )
    p = _command(sub, "list", list_keys, "list a program's keys (never their secrets)")
    _programa(p)
    p = _command(sub, "revoke", revoke_key, "revoke a key by id")
    p.add_argument("id", type=int)


def _fan_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "register", register_fan, "register a fan")
    _programa(p, fan=True)
    p.add_argument("--nombre", required=True)
    p.add_argument("--correo", required=True)
    p.add_argument("--socio-desde", type=int, required=True)
    p.add_argument("--temporadas", type=int, default=0)
    p.add_argument("--qr-token", default="", help="generated when omitted")
    p = _command(sub, "update", update_fan, "change the fields given")
    _programa(p, fan=True)
    p.add_argument("--nombre")
    p.add_argument("--correo")
    p.add_argument("--socio-desde", type=int)
    p.add_argument("--temporadas", type=int)
    p.add_argument("--qr-token")
    _programa(_command(sub, "get", get_fan, "show a fan"), fan=True)
    p = _command(sub, "baja", deactivate_fan, "activo -> baja, with a reason")
    _programa(p, fan=True)
    p.add_argument("--motivo", required=True)
    _programa(_command(sub, "reactivate", reactivate_fan, "baja -> activo"), fan=True)
    _programa(
        _command(
            sub,
            "ledger",
            get_ledger,
            "a fan's points ledger, oldest first, with the running balance",
        ),
        fan=True,
    )


def _promo_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    estados = [estado.value for estado in EstadoPromo]
    p = _command(sub, "create", create_promo, "create a promotion")
    _programa(p)
    p.add_argument("nombre")
    p.add_argument("--vigencia-fin", required=True, help="YYYY-MM-DD")
    p.add_argument("--descripcion", default="")
    p.add_argument("--estado", choices=estados, default="")
    p.add_argument("--puntos-canje", type=int, default=0)
    p = _command(sub, "update", update_promo, "change the fields given")
    _programa(p)
    p.add_argument("id", type=int, help="promotion id")
    p.add_argument("--estado", choices=estados)
    p.add_argument("--vigencia-fin", help="YYYY-MM-DD")
    p.add_argument("--puntos-canje", type=int)
    p.add_argument("--descripcion")


def _code_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "assign", assign_code, "deliver a code to a fan: disponible -> asignado")
    _programa(p)
    p.add_argument("--promo", type=int, required=True, help="promotion id")
    p.add_argument("codigo")
    p.add_argument("--fan", required=True, help="Fan ID")
    p = _command(
        sub,
        "release",
        release_code,
        "take a code out of circulation: disponible/asignado -> liberado",
    )
    _programa(p)
    p.add_argument("--promo", type=int, required=True, help="promotion id")
    p.add_argument("codigo")
    p = _command(
        sub, "next", assign_next_code, "deliver the promotion's oldest disponible code to a fan"
    )
    _programa(p)
    p.add_argument("--promo", type=_int_bits(32), required=True, help="promotion id")
    p.add_argument("--fan", required=True, help="Fan ID")
    _request_id(p)
    p = _command(
        sub,
        "import",
        import_codes,
        "deposit the codes of a file ('-' = stdin), split like pasted text, in "
        f"calls of {MAX_CODES_PER_CALL}; run it again to resume (idempotent)",
    )
    _programa(p)
    p.add_argument("promo", type=_int_bits(32), help="promotion id")
    p.add_argument("file")


def _request_id(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--request-id",
        help="made at most once per id (default: a new one); the id an error gave, to retry "
        "a command whose answer was lost",
    )


def _points_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(
        sub,
        "adjust",
        adjust_points,
        "a manual adjustment: --puntos 100 credits, --puntos -50 debits",
    )
    _programa(p, fan=True)
    # A negative number is a value here, not an option (argparse: no option looks like one).
    p.add_argument("--puntos", type=_int_bits(64), required=True, help="points, + credit, - debit")
    p.add_argument("--motivo", required=True, help="why (kept in the ledger entry)")
    _request_id(p)


def _sale_commands(sub: _Sub[argparse.ArgumentParser]) -> None:
    p = _command(sub, "void", void_sale, "void a sale: takes back the points it credited, once")
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
