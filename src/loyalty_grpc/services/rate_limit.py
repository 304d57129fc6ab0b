"""The per-key call limit of one server process: calls reserved from PostgreSQL in small
batches, so that a busy key costs a database round trip per batch, not per call.

The counters live in PostgreSQL (store/rate_limit.py), shared by every process and host.
A call of a key this process holds no reserved call for asks the database for a batch:
one call for itself and some spare ones, all counted at once in the database's current
second (so other processes see them as used). Later calls of the key take a spare call
without a round trip, but only until that second ends on the database clock (measured
locally from the `ahora` the database returned, rounded towards earlier), because a call
must happen within the second it is counted in (proof in domain/rate_limit.py). Spare
calls left when the second ends are returned with the key's next request.

Batch size adapts to the key's traffic in this process: 1 for a key seen for the first
time or after a pause; doubled when a batch ran out within its second; else the calls the
key made in its last second. It never exceeds `max_batch` (default a tenth of the limit, at
most 64) nor a quarter of what the database had left, so near the limit batches shrink to
one call and another process of the key is refused almost exactly when the limit is
reached. A key that goes quiet leaves at most a batch of unused calls counted for up to a
minute: stricter, never looser.

A rejection is remembered until the end of its second (nothing can free room sooner
except a return), so a runaway loop costs one round trip per second and process.

The RateLimit fields a call reports: `r` is what the database had left after the batch plus
this process's spare calls of the key; `t` and Retry-After are the database's answer to the
batch (at most a second old, so never shorter than the truth).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from loyalty_grpc.domain.rate_limit import SLOTS, Cuota, Devolucion, cuota
from loyalty_grpc.store.rate_limit import Reserva

PURGE_SECONDS = 300.0
MAX_BATCH = 64


def default_max_batch(limit: int) -> int:
    return max(1, min(MAX_BATCH, limit // 10))


class Counters(Protocol):
    """Where the counters live: store/rate_limit.PgCounters (tests also run the pure model
    of domain/rate_limit.py behind it, to replay many processes on a simulated clock)."""

    def reserve(self, clave_id: int, pedidas: int, limite: int,
                devolucion: Devolucion | None = None) -> Reserva: ...

    def purge(self) -> None: ...


@dataclass
class _Lote:
    """One key's last answer from the database, as this process uses it."""

    segundo: int
    # Local clock time (seconds) at which `segundo` has surely ended on the database clock.
    vence: float
    pedidas: int
    libres: int  # spare calls not used yet (0 after a rejection)
    rechazada: bool
    cuota: Cuota  # the database's view right after the batch
    # Calls admitted from batches counted in `segundo` (this one and earlier ones).
    usadas_en_segundo: int

    def view(self, limit: int) -> Cuota:
        if self.rechazada:
            return self.cuota
        return Cuota(limit, True, self.cuota.remaining + self.libres, self.cuota.reset)


@dataclass
class _Clave:
    lock: threading.Lock = field(default_factory=threading.Lock)
    lote: _Lote | None = None


class RateLimiter:
    """`limit` calls per key in any 60 s (limit >= 1), shared through PostgreSQL."""

    def __init__(self, counters: Counters, limit: int, *,
                 purge_seconds: float = PURGE_SECONDS, max_batch: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError("the limit must be at least 1 (0 means: no RateLimiter)")
        self.limit = limit
        self.max_batch = max_batch if max_batch is not None else default_max_batch(limit)
        if self.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._counters = counters
        self._clock = clock
        self._purge_seconds = purge_seconds
        self._next_purge = clock() + purge_seconds
        self._claves: dict[int, _Clave] = {}
        self._claves_lock = threading.Lock()

    def take(self, clave_id: int) -> Cuota:
        """Admit one call of the key if the limit has room; the client's view either way."""
        if self.max_batch == 1:  # no reservations: every call asks the database
            reserva = self._counters.reserve(clave_id, 1, self.limit)
            self._maybe_purge()
            return cuota(reserva.cuentas, self.limit, admitida=reserva.concedidas == 1)
        estado = self._estado(clave_id)
        with estado.lock:
            lote = estado.lote
            now = self._clock()
            if lote is not None and now < lote.vence:
                if lote.libres:
                    lote.libres -= 1
                    lote.usadas_en_segundo += 1
                    return lote.view(self.limit)
                if lote.rechazada:
                    return lote.cuota
            estado.lote = self._reserve(clave_id, lote, now)
            return estado.lote.view(self.limit)

    def _reserve(self, clave_id: int, lote: _Lote | None, now: float) -> _Lote:
        pedidas = self._batch_size(lote, now)
        devolucion = (Devolucion(lote.segundo, lote.libres)
                      if lote is not None and lote.libres else None)
        sent = self._clock()
        reserva = self._counters.reserve(clave_id, pedidas, self.limit, devolucion)
        self._maybe_purge()
        granted = reserva.concedidas
        before = (lote.usadas_en_segundo
                  if lote is not None and lote.segundo == reserva.segundo else 0)
        return _Lote(
            segundo=reserva.segundo,
            vence=sent + (reserva.segundo + 1 - reserva.ahora),
            pedidas=pedidas,
            libres=max(0, granted - 1),
            rechazada=granted == 0,
            cuota=cuota(reserva.cuentas, self.limit, admitida=granted > 0),
            usadas_en_segundo=before + (1 if granted else 0),
        )

    def _batch_size(self, lote: _Lote | None, now: float) -> int:
        if lote is None or lote.rechazada or now >= lote.vence + 1:
            wanted = 1  # new, rejected, or after a pause
        elif now < lote.vence:
            wanted = 2 * lote.pedidas  # ran out within its second
        else:
            wanted = lote.usadas_en_segundo  # the second just ended: as many as it used
        if lote is not None:
            # Near the limit, smaller batches: spare calls held here are calls another
            # process of the key is refused.
            wanted = min(wanted, lote.cuota.remaining // 4)
        return max(1, min(wanted, self.max_batch))

    def _estado(self, clave_id: int) -> _Clave:
        with self._claves_lock:
            estado = self._claves.get(clave_id)
            if estado is None:
                estado = self._claves[clave_id] = _Clave()
            return estado

    def _maybe_purge(self) -> None:
        """Every `purge_seconds`: drop idle keys here and their rows in the database."""
        now = self._clock()
        with self._claves_lock:
            if now < self._next_purge:
                return
            self._next_purge = now + self._purge_seconds
            idle = [clave_id for clave_id, estado in self._claves.items()
                    if estado.lote is None or now > estado.lote.vence + SLOTS]
            for clave_id in idle:
                del self._claves[clave_id]
        self._counters.purge()
