"""The back office's proto enums and Timestamps <-> the domain's values: one table per enum,
derived (proto value name = the enum's prefix + the domain value upper-cased, e.g.
EstadoFan.BAJA "baja" <-> FAN_STATE_BAJA), used by the servicer (api/backoffice.py) and
the `loyalty admin` CLI (runtime/cli/admin)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo
from loyalty_grpc.domain.timestamps import format_iso_utc
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

P = TypeVar("P", bound=int)  # the proto enum's ValueType
D = TypeVar("D", bound=StrEnum)


@dataclass(frozen=True)
class EnumTable(Generic[P, D]):
    """A proto enum (its `<PREFIX>_UNSPECIFIED = 0` meaning "not given") and the domain
    enum whose values its other values name."""

    proto: _EnumTypeWrapper[P]
    domain: type[D]
    _unspecified: P = field(init=False, repr=False)
    _to_proto: dict[D, P] = field(init=False, repr=False)
    _to_domain: dict[int, D] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        unspecified = self.proto.keys()[0]  # declaration order: the zero value comes first
        prefix = unspecified.removesuffix("UNSPECIFIED")
        to_proto = {d: self.proto.Value(prefix + d.value.upper()) for d in self.domain}
        if self.proto.Value(unspecified) != 0 or len(to_proto) != len(self.proto.keys()) - 1:
            raise AssertionError(f"{self.proto.DESCRIPTOR.full_name} != {self.domain.__name__}")
        object.__setattr__(self, "_unspecified", self.proto.Value(unspecified))
        object.__setattr__(self, "_to_proto", to_proto)
        object.__setattr__(self, "_to_domain", {n: d for d, n in to_proto.items()})

    def number(self, value: D | str) -> P:
        """The proto value of a domain value or of its text (e.g. "baja"); "" (not given)
        is UNSPECIFIED."""
        return self._unspecified if value == "" else self._to_proto[self.domain(value)]

    def text(self, number: int) -> str:
        """The domain text of a proto value: "" for UNSPECIFIED (as an empty string meant
        before the enum), the number itself for a value this build does not know (so that
        the domain's parser rejects it with its usual error)."""
        if number == 0:
            return ""
        found = self._to_domain.get(number)
        return str(number) if found is None else found.value


FAN_STATE = EnumTable(pb.FanState, EstadoFan)
PROMO_STATE = EnumTable(pb.PromoState, EstadoPromo)
CODE_STATE = EnumTable(pb.CodeState, EstadoCodigo)
KEY_MODE = EnumTable(pb.KeyMode, Modo)

# Every enum of the back office by its full name (what the CLI's output looks up).
TABLES: dict[str, EnumTable[Any, Any]] = {
    t.proto.DESCRIPTOR.full_name: t for t in (FAN_STATE, PROMO_STATE, CODE_STATE, KEY_MODE)
}


def timestamp(moment: datetime | None) -> Timestamp | None:
    """A Timestamp of a moment (naive = UTC); None (the field stays unset) for no moment."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ts = Timestamp()
    ts.FromDatetime(moment.astimezone(UTC))
    return ts


def iso_text(ts: Timestamp) -> str:
    """A Timestamp as the contract writes times: ISO 8601 UTC (domain.timestamps)."""
    return format_iso_utc(ts.ToDatetime(tzinfo=UTC))
