"""The fixture of `loyalty admin apply FILE.json` (DESIGN.md §4): parse and validate the
whole document into frozen dataclasses before anything touches the database. Pure, no I/O.

Every problem is one `LoyaltyError` whose `detalle` is one line naming the entry and the
field, e.g. ``programas[0] (halcones).fans[1] (HAL0002).correo: falta el campo``. Codes:
`fixture_invalido`, except an unknown permission (`permiso_desconocido`), a key without a
valid prefix (`clave_mal_formada`; the key itself is never echoed) and two fans of a
program with the same e-mail (`correo_duplicado`).

What the document means (where DESIGN.md §4 is silent):

- Every entry named is set to exactly what the fixture says; an optional field left out
  takes its default (it does not mean "keep what the database has"). Entries the
  fixture does not name are left alone: applying never deletes.
- Field values follow the back office's rules (domain.text, programs, fans, promos,
  codes): text trimmed and without control characters (`descripcion` may span lines),
  `programa.id` lower-case letters, digits, ``-``, ``_``; Fan IDs canonical and without
  ``@`` or ``/``; QR tokens URL-safe; `socio_desde` 1900–2100; dates ``AAAA-MM-DD``.
- Numbers that are counts must be JSON integers (``5``, not ``5.0`` or ``"5"``) within
  int32. `tasa_puntos` is a decimal string or a JSON number, read exactly (never float).
- `qr_url`, `claves`, `fans`, `promos`, `codigos` are optional; `permisos` is required
  (``[]`` for a key that may only ping).
- `fan.qr_token` is required: it is printed on the fan's card, so the fixture owns it
  (no random token, which would make a second apply differ). `puntos`: the balance, 0
  or more. `baja_motivo`: required with `estado: baja`, refused with `activo`.
- A code's `fan` is required for `asignado`/`canjeado`, optional for `liberado` and
  refused for `disponible` (never delivered to anyone). The fan must be in the same
  program, in the fixture or (checked by apply) in the database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from functools import partial
from typing import NoReturn, TypeVar

from loyalty_grpc.domain.codes import check_new_code
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import (
    canonical_fan_id,
    check_qr_token,
    check_socio_desde,
    check_temporadas,
    email_key,
    new_fan_id,
    normalize_email,
)
from loyalty_grpc.domain.integers import INT32_MAX, INT32_MIN, integral
from loyalty_grpc.domain.keys import PREFIJOS, Modo, mode_of, require_well_formed
from loyalty_grpc.domain.permissions import Permiso, parse_permisos
from loyalty_grpc.domain.programs import check_qr_url, parse_tasa, program_id
from loyalty_grpc.domain.promos import (
    EstadoCodigo,
    EstadoFan,
    EstadoPromo,
    check_puntos_canje,
    parse_estado_codigo,
    parse_estado_fan,
    parse_estado_promo,
    parse_fecha,
    promo_name,
)
from loyalty_grpc.domain.text import multi_line, single_line

# The store's Integer/BigInteger columns are read as int32 by the API (DESIGN.md §3).
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ClaveFixture:
    ruta: str
    clave: str = field(repr=False)
    modo: Modo
    integracion: str
    permisos: frozenset[Permiso]


@dataclass(frozen=True)
class FanFixture:
    ruta: str
    fan_id: str
    nombre: str
    correo: str
    socio_desde: int
    temporadas: int
    qr_token: str
    puntos: int
    estado: EstadoFan
    baja_motivo: str | None


@dataclass(frozen=True)
class CodigoFixture:
    ruta: str
    codigo: str
    estado: EstadoCodigo
    # Canonical Fan ID of a fan of the same program (in the fixture or in the database).
    fan: str | None


@dataclass(frozen=True)
class PromoFixture:
    ruta: str
    nombre: str
    descripcion: str
    estado: EstadoPromo
    vigencia_fin: date
    puntos_canje: int
    codigos: tuple[CodigoFixture, ...]


@dataclass(frozen=True)
class ProgramaFixture:
    ruta: str
    id: str
    nombre: str
    tasa_puntos: Decimal
    qr_url: str
    claves: tuple[ClaveFixture, ...]
    fans: tuple[FanFixture, ...]
    promos: tuple[PromoFixture, ...]


@dataclass(frozen=True)
class Fixture:
    programas: tuple[ProgramaFixture, ...]


def parse_fixture(document: str) -> Fixture:
    """The validated fixture, or the first problem found (in document order)."""
    try:
        data = json.loads(
            document,
            object_pairs_hook=_JsonObject.from_pairs,
            parse_float=Decimal,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        _fail(
            "documento", f"no es JSON válido: {exc.msg} (línea {exc.lineno}, columna {exc.colno})"
        )
    except (ValueError, RecursionError) as exc:
        _fail("documento", f"no es JSON válido: {exc}")
    root = _Obj(data, "", ("programas",), label="documento")
    programas: list[ProgramaFixture] = []
    seen_ids: dict[str, str] = {}
    seen_keys: dict[str, str] = {}
    for path, item in root.items("programas", required=True):
        programas.append(_programa(item, path, seen_ids, seen_keys))
    return Fixture(tuple(programas))


# --- entries ------------------------------------------------------------------------------


def _programa(
    value: object, path: str, seen_ids: dict[str, str], seen_keys: dict[str, str]
) -> ProgramaFixture:
    """`seen_ids`, `seen_keys`: program ids and keys met so far (unique in the fixture)."""
    obj = _Obj(value, path, ("id", "nombre", "tasa_puntos", "qr_url", "claves", "fans", "promos"))
    programa_id = obj.parsed("id", program_id)
    obj.label(programa_id)
    _unique(seen_ids, programa_id, obj.path, "id", "id de programa repetido")
    nombre = obj.text("nombre")
    tasa = _tasa(obj)
    qr_url = obj.parsed("qr_url", check_qr_url, default="")

    claves = []
    for item_path, item in obj.items("claves"):
        clave = _clave(item, item_path)
        _unique(seen_keys, clave.clave, clave.ruta, "clave", "clave repetida")
        claves.append(clave)

    fans: list[FanFixture] = []
    seen_fan_ids: dict[str, str] = {}
    seen_emails: dict[str, str] = {}
    seen_qr: dict[str, str] = {}
    for item_path, item in obj.items("fans"):
        fan = _fan(item, item_path)
        _unique(seen_fan_ids, fan.fan_id, fan.ruta, "id", "Fan ID repetido")
        _unique(
            seen_emails,
            email_key(fan.correo),
            fan.ruta,
            "correo",
            "mismo correo (sin distinguir mayúsculas)",
            codigo=CodigoError.CORREO_DUPLICADO,
        )
        _unique(seen_qr, fan.qr_token, fan.ruta, "qr_token", "qr_token repetido")
        fans.append(fan)

    promos: list[PromoFixture] = []
    seen_promos: dict[str, str] = {}
    for item_path, item in obj.items("promos"):
        promo = _promo(item, item_path)
        _unique(
            seen_promos,
            promo.nombre.lower(),
            promo.ruta,
            "nombre",
            "nombre de promoción repetido (sin distinguir mayúsculas)",
        )
        promos.append(promo)

    return ProgramaFixture(
        obj.path, programa_id, nombre, tasa, qr_url, tuple(claves), tuple(fans), tuple(promos)
    )


def _tasa(obj: _Obj) -> Decimal:
    """A decimal string or a JSON number (read as an exact Decimal, never a float)."""
    raw = obj.get("tasa_puntos")
    where = obj.at("tasa_puntos")
    if raw is _MISSING:
        _fail(where, "falta el campo")
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal | str):
        _fail(where, f"debe ser un número o texto decimal, no {_type_name(raw)}")
    return _domain(parse_tasa, str(raw), where, show=True)


def _clave(value: object, path: str) -> ClaveFixture:
    obj = _Obj(value, path, ("clave", "integracion", "permisos"))
    raw = obj.get("clave")
    if raw is _MISSING:
        _fail(obj.at("clave"), "falta el campo")
    if not isinstance(raw, str):
        _fail(obj.at("clave"), f"debe ser texto, no {_type_name(raw)}")
    try:
        modo = require_well_formed(raw.strip())
    except LoyaltyError as exc:
        # The catalogue's detalle describes the format without echoing the key.
        _fail(obj.at("clave"), exc.detalle, exc.codigo)
    integracion = obj.text("integracion")
    obj.label(integracion)
    permisos: set[Permiso] = set()
    for item_path, item in obj.items("permisos", required=True):
        if not isinstance(item, str):
            _fail(item_path, f"debe ser texto, no {_type_name(item)}")
        try:
            permisos |= parse_permisos([item])
        except LoyaltyError as exc:
            _fail(item_path, exc.detalle, exc.codigo)
    return ClaveFixture(obj.path, raw.strip(), modo, integracion, frozenset(permisos))


def _fan(value: object, path: str) -> FanFixture:
    obj = _Obj(
        value,
        path,
        (
            "id",
            "nombre",
            "correo",
            "socio_desde",
            "temporadas",
            "qr_token",
            "puntos",
            "estado",
            "baja_motivo",
        ),
    )
    fan_id = obj.parsed("id", new_fan_id)
    obj.label(fan_id)
    nombre = obj.text("nombre")
    correo = obj.parsed("correo", normalize_email)
    socio_desde = obj.integer("socio_desde", rule=check_socio_desde)
    temporadas = obj.integer("temporadas", rule=check_temporadas, default=0)
    qr_token = obj.parsed("qr_token", check_qr_token)
    puntos = obj.integer("puntos", rule=_check_saldo, default=0)
    estado = obj.parsed("estado", parse_estado_fan, default=EstadoFan.ACTIVO, show=True)
    baja_motivo: str | None = None
    if estado is EstadoFan.BAJA:
        baja_motivo = obj.text("baja_motivo")
    elif obj.get("baja_motivo") is not _MISSING:
        _fail(obj.at("baja_motivo"), "solo va con estado baja")
    return FanFixture(
        obj.path,
        fan_id,
        nombre,
        correo,
        socio_desde,
        temporadas,
        qr_token,
        puntos,
        estado,
        baja_motivo,
    )


def _promo(value: object, path: str) -> PromoFixture:
    obj = _Obj(
        value, path, ("nombre", "descripcion", "estado", "vigencia_fin", "puntos_canje", "codigos")
    )
    nombre = obj.parsed("nombre", promo_name)
    obj.label(nombre)
    descripcion = obj.parsed("descripcion", multi_line, default="")
    estado = obj.parsed("estado", parse_estado_promo, default=EstadoPromo.ACTIVA, show=True)
    vigencia_fin = obj.parsed("vigencia_fin", parse_fecha, show=True)
    puntos_canje = obj.integer("puntos_canje", rule=check_puntos_canje, default=0)
    codigos: list[CodigoFixture] = []
    seen: dict[str, str] = {}
    for item_path, item in obj.items("codigos"):
        codigo = _codigo(item, item_path)
        _unique(seen, codigo.codigo, codigo.ruta, "codigo", "código repetido en la promoción")
        codigos.append(codigo)
    return PromoFixture(
        obj.path, nombre, descripcion, estado, vigencia_fin, puntos_canje, tuple(codigos)
    )


def _codigo(value: object, path: str) -> CodigoFixture:
    obj = _Obj(value, path, ("codigo", "estado", "fan"))
    codigo = obj.parsed("codigo", check_new_code)
    obj.label(codigo)
    estado = obj.parsed("estado", parse_estado_codigo, default=EstadoCodigo.DISPONIBLE, show=True)
    fan: str | None = None
    if obj.get("fan") is not _MISSING:
        if estado is EstadoCodigo.DISPONIBLE:
            _fail(obj.at("fan"), "un código disponible no se ha entregado a ningún fan")
        fan = obj.parsed("fan", canonical_fan_id)
    elif estado in (EstadoCodigo.ASIGNADO, EstadoCodigo.CANJEADO):
        _fail(obj.at("fan"), f"falta el campo (requerido con estado {estado.value})")
    return CodigoFixture(obj.path, codigo, estado, fan)


# --- reading JSON objects -----------------------------------------------------------------


class _Missing:
    pass


_MISSING = _Missing()
_T = TypeVar("_T")
_V = TypeVar("_V")


class _JsonObject(dict[str, object]):
    """A JSON object that remembers field names written more than once (json.loads would
    silently keep the last)."""

    repetidos: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, object]]) -> _JsonObject:
        obj = cls(pairs)
        if len(obj) != len(pairs):
            names = [name for name, _ in pairs]
            obj.repetidos = tuple(sorted({n for n in names if names.count(n) > 1}))
        return obj


class _Obj:
    """One JSON object of the fixture being read: where it is and its fields."""

    def __init__(
        self, value: object, path: str, fields: tuple[str, ...], *, label: str | None = None
    ) -> None:
        self.path = path
        where = label or path
        if not isinstance(value, dict):
            _fail(where, f"debe ser un objeto, no {_type_name(value)}")
        for name in value:
            if name not in fields:
                _fail(self.at(name), f"campo desconocido; los campos son: {', '.join(fields)}")
        if isinstance(value, _JsonObject) and value.repetidos:
            _fail(self.at(value.repetidos[0]), "campo repetido en el objeto")
        self._data: dict[str, object] = value

    def label(self, text: str) -> None:
        """Name the entry in later paths: ``fans[1]`` becomes ``fans[1] (HAL0002)``."""
        self.path = f"{self.path} ({_show(text, quote=False)})"

    def at(self, name: str) -> str:
        named = _show(name)
        if _FIELD_NAME.fullmatch(name) and named == f'"{name}"':
            named = name  # a plain field name needs no quotes
        return f"{self.path}.{named}" if self.path else named

    def get(self, name: str) -> object:
        return self._data.get(name, _MISSING)

    def text(self, name: str, *, default: str | None = None) -> str:
        """One trimmed line without control characters; empty only when optional."""
        return self.parsed(name, partial(single_line, required=default is None), default=default)

    def parsed(
        self,
        name: str,
        rule: Callable[[str, str], _T],
        *,
        default: _T | None = None,
        show: bool = False,
    ) -> _T:
        """A text field read by a domain `rule`; absent → `default`, or falta when there is
        none."""
        raw = self.get(name)
        if raw is _MISSING:
            if default is None:
                _fail(self.at(name), "falta el campo")
            return default
        if not isinstance(raw, str):
            _fail(self.at(name), f"debe ser texto, no {_type_name(raw)}")
        return _domain(rule, raw, self.at(name), show=show)

    def integer(
        self, name: str, *, rule: Callable[[int, str], int], default: int | None = None
    ) -> int:
        """A JSON number with an integer value (``5`` or ``5.0``, as everywhere: domain
        .integers.integral; not ``5.5`` or ``"5"``) the store can hold, read by a domain
        `rule`; absent → `default`, or falta when there is none."""
        raw = self.get(name)
        if raw is _MISSING:
            if default is None:
                _fail(self.at(name), "falta el campo")
            return default
        if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
            _fail(self.at(name), f"debe ser un número entero, no {_type_name(raw)}")
        if not INT32_MIN <= raw <= INT32_MAX:
            _fail(self.at(name), f"{raw} fuera de rango")
        whole = integral(raw)
        if whole is None:
            _fail(self.at(name), f"debe ser un número entero, no {_type_name(raw)}")
        return _domain(rule, whole, self.at(name), show=True)

    def items(self, name: str, *, required: bool = False) -> Iterator[tuple[str, object]]:
        """The elements of a list field with their paths; absent → none (or falta)."""
        raw = self.get(name)
        if raw is _MISSING:
            if required:
                _fail(self.at(name), "falta el campo")
            return
        if not isinstance(raw, list):
            _fail(self.at(name), f"debe ser una lista, no {_type_name(raw)}")
        for index, item in enumerate(raw):
            yield f"{self.at(name)}[{index}]", item


# --- helpers ------------------------------------------------------------------------------


def _fail(
    where: str, problema: str, codigo: CodigoError = CodigoError.FIXTURE_INVALIDO
) -> NoReturn:
    raise LoyaltyError(codigo, f"{where}: {problema}")


def _domain(rule: Callable[[_V, str], _T], value: _V, where: str, *, show: bool = False) -> _T:
    """Apply a domain rule that names its `campo` in its detalle; its failure becomes
    fixture_invalido with that one-line detalle (plus the value when `show`: never for
    secrets or personal data)."""
    try:
        return rule(value, where)
    except LoyaltyError as exc:
        shown = ""
        if show:
            shown = f" (recibido {_show(value) if isinstance(value, str) else value})"
        raise LoyaltyError(CodigoError.FIXTURE_INVALIDO, exc.detalle + shown) from None


def _check_saldo(puntos: int, campo: str) -> int:
    """The balance a fan must have: 0 or more."""
    if puntos < 0:
        raise LoyaltyError(CodigoError.FIXTURE_INVALIDO, f"{campo}: no puede ser negativo")
    return puntos


def _unique(
    seen: dict[str, str],
    key: str,
    ruta: str,
    campo: str,
    problema: str,
    *,
    codigo: CodigoError = CodigoError.FIXTURE_INVALIDO,
) -> None:
    """Remember `key` for the entry at `ruta`; a second entry with it fails naming both."""
    first = seen.setdefault(key, ruta)
    if first != ruta:
        _fail(f"{ruta}.{campo}", f"{problema}; ya aparece en {first}", codigo)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} no es un número JSON")


_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "un booleano"),
    (int, "un número entero"),
    (Decimal, "un número con decimales"),
    (str, "texto"),
    (list, "una lista"),
    (dict, "un objeto"),
)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), "un objeto")


def _show(text: str, *, quote: bool = True) -> str:
    """A value for a detalle (domain.detalle.shown), never anything that looks like an API
    key (keys are secrets)."""
    if mode_of(text.strip()) is not None or any(prefix in text for prefix in PREFIJOS.values()):
        return "(valor oculto)"
    return shown(text, quote=quote)
