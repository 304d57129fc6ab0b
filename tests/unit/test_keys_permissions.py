"""domain/keys.py (Bearer header, prefixes, modes, hashing) and domain/permissions.py."""

from __future__ import annotations

import hashlib

import pytest

from loyalty_grpc.domain import keys, permissions
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

LIVE = "lp_vivo_" + "a" * 24
TEST = "lp_prueba_" + "B1" * 12


# ---------------------------------------------------------------- bearer header


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (f"Bearer {LIVE}", LIVE),
        (f"bearer {LIVE}", LIVE),
        (f"BEARER   {TEST}", TEST),
        (f"  Bearer {LIVE}  ", LIVE),
        ("Bearer not-a-key", "not-a-key"),  # the shape of the key is checked later
    ],
)
def test_bearer_token(header, token):
    assert keys.bearer_token(header) == token


@pytest.mark.parametrize("header", [None, "", "   "])
def test_bearer_missing(header):
    with pytest.raises(LoyaltyError) as err:
        keys.bearer_token(header)
    assert err.value.codigo is CodigoError.NO_AUTENTICADO


@pytest.mark.parametrize(
    "header",
    [
        LIVE,
        f"Basic {LIVE}",
        "Bearer",
        "Bearer ",
        f"Bearer {LIVE} extra",
        f"Token {LIVE}",
        f"Bearer\t{LIVE}",
    ],
)
def test_bearer_malformed(header):
    with pytest.raises(LoyaltyError) as err:
        keys.bearer_token(header)
    assert err.value.codigo is CodigoError.NO_AUTENTICADO
    assert "Bearer" in err.value.detalle


# ---------------------------------------------------------------- prefixes and modes


def test_prefixes():
    assert keys.PREFIJOS == {Modo.VIVO: "lp_vivo_", Modo.PRUEBA: "lp_prueba_"}


@pytest.mark.parametrize(
    ("key", "modo"),
    [
        (LIVE, Modo.VIVO),
        (TEST, Modo.PRUEBA),
        ("lp_vivo_" + "Z9" * 20, Modo.VIVO),
    ],
)
def test_mode_of_well_formed(key, modo):
    assert keys.mode_of(key) is modo
    assert keys.require_well_formed(key) is modo


@pytest.mark.parametrize(
    "key",
    [
        "",
        "lp_vivo_" + "a" * 23,  # too short
        "lp_test_" + "a" * 24,  # unknown mode
        "LP_VIVO_" + "a" * 24,  # prefix is case-sensitive
        "lp_vivo_" + "a" * 23 + "-",  # only letters and digits
        "lp_vivo_" + "a" * 23 + "ñ",
        " " + LIVE,
        LIVE + "\n",
        "xlp_vivo_" + "a" * 24,
    ],
)
def test_mode_of_malformed(key):
    assert keys.mode_of(key) is None
    with pytest.raises(LoyaltyError) as err:
        keys.require_well_formed(key)
    assert err.value.codigo is CodigoError.CLAVE_MAL_FORMADA
    # The key itself is never echoed.
    assert key.strip() == "" or key.strip() not in err.value.detalle


@pytest.mark.parametrize("modo", list(Modo))
def test_new_key_is_well_formed_and_random(modo: Modo) -> None:
    a, b = keys.new_key(modo), keys.new_key(modo)
    assert keys.mode_of(a) is modo
    assert a.startswith(keys.PREFIJOS[modo])
    assert len(a) == len(keys.PREFIJOS[modo]) + keys.SECRET_LENGTH
    assert a != b


def test_hash_and_suffix():
    assert keys.key_hash(LIVE) == hashlib.sha256(LIVE.encode()).digest()
    assert len(keys.key_hash(LIVE)) == 32
    assert keys.key_hash(LIVE) != keys.key_hash(TEST)
    assert keys.suffix(LIVE) == "aaaa"
    assert keys.suffix(TEST) == "B1B1"


# ---------------------------------------------------------------- permissions


def test_parse_permisos():
    assert permissions.parse_permisos([]) == frozenset()
    assert permissions.parse_permisos(["tx:escribir", "fan:leer", "fan:leer"]) == frozenset(
        {Permiso.TX_ESCRIBIR, Permiso.FAN_LEER}
    )
    assert permissions.parse_permisos(p.value for p in Permiso) == frozenset(Permiso)


@pytest.mark.parametrize("name", ["fan:escribir", "FAN:LEER", " fan:leer", "", "admin"])
def test_parse_permisos_unknown(name):
    with pytest.raises(LoyaltyError) as err:
        permissions.parse_permisos(["fan:leer", name])
    assert err.value.codigo is CodigoError.PERMISO_DESCONOCIDO
    assert f"permiso {shown(name)} no existe" in err.value.detalle


def test_sorted_names_follow_the_contract_table():
    assert permissions.sorted_names([]) == []
    assert permissions.sorted_names(
        [Permiso.ROSTER_LEER, Permiso.FAN_LEER, Permiso.TX_ESCRIBIR, Permiso.FAN_LEER]
    ) == ["fan:leer", "tx:escribir", "roster:leer"]
    assert permissions.sorted_names(Permiso) == [
        "fan:leer",
        "tx:escribir",
        "redeem:escribir",
        "codigos:escribir",
        "roster:leer",
    ]


@pytest.mark.parametrize(
    ("operation", "needed"),
    [
        ("ResolveFan", Permiso.FAN_LEER),
        ("RegisterTx", Permiso.TX_ESCRIBIR),
        ("Redeem", Permiso.REDEEM_ESCRIBIR),
        ("ListPromos", Permiso.CODIGOS_ESCRIBIR),
        ("DepositCodes", Permiso.CODIGOS_ESCRIBIR),
        ("Roster", Permiso.ROSTER_LEER),
        ("RosterPost", Permiso.ROSTER_LEER),
    ],
)
def test_check_requires_the_contract_permission(operation, needed):
    permissions.check(operation, frozenset({needed}))
    permissions.check(operation, frozenset(Permiso))
    with pytest.raises(LoyaltyError) as err:
        permissions.check(operation, frozenset(Permiso) - {needed})
    assert err.value.codigo is CodigoError.PERMISO_DENEGADO
    assert needed.value in err.value.detalle


@pytest.mark.parametrize("operation", ["Ping", "PingGet"])
def test_ping_needs_no_permission(operation):
    permissions.check(operation, frozenset())


def test_undeclared_operation_is_a_bug():
    with pytest.raises(LoyaltyError) as err:
        permissions.check("Nope", frozenset(Permiso))
    assert err.value.codigo is CodigoError.ERROR_INTERNO


def test_every_pos_method_has_a_permission_entry():
    methods = pos_service_pb2.DESCRIPTOR.services_by_name["PosService"].methods
    names = {m.name for m in methods}
    assert names, "PosService has no methods?"
    assert names <= set(permissions.REQUIRED), names - set(permissions.REQUIRED)
    # …and the table names no method the service does not have.
    assert set(permissions.REQUIRED) <= names, set(permissions.REQUIRED) - names
