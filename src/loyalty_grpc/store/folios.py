"""The sale's folio (`tx`, `ventas.id`): taken from the sequence `ventas_folio_seq` (an
`integer` sequence, so a folio is an int32, a JSON number), never per program, never
repeated, and passed to the sale's statement (store/sale.py) as a plain value.

A process does not ask the sequence once per sale: `Folios` holds a block of `BLOCK`
values taken in one autocommit round trip (`SELECT nextval('ventas_folio_seq') FROM
generate_series(1, 64)`), hands them out one per sale under a lock (thread-safe), and
takes the next block when the last one is used: one round trip per 64 sales per process,
and no row that every sale locks (the sequence is not transactional). Concurrent blocks of
several processes interleave, so a block is a list of values, not a range.

Folios are unique, not dense and not in commit order: a duplicate sale (its id_externo
known) leaves the folio it took unused, a sale that fails leaves its folio unused, and a
process that exits loses what is left of its block (at most BLOCK - 1 values). The
identity column the folio came from before had gaps too. Nothing reads folios as an order
(they are looked up by equality: the replay of a sale, the back office's void).

One `Folios` per process, made with the engine at start-up (api/server.build_server) and
held by the POS servicer next to it; the sale's use case takes one folio per sale
(services/pos/sales.py). Back-office and fixture inserts of `ventas` name
`nextval('ventas_folio_seq')` in their own INSERT instead.
"""

from __future__ import annotations

import threading
from collections import deque

from sqlalchemy import Engine

from loyalty_grpc.store.autocommit import fetch_all
from loyalty_grpc.store.tables import folio_sequence

BLOCK = 64

SEQUENCE = folio_sequence.name

_BLOCK_SQL = f"SELECT nextval('{SEQUENCE}') FROM generate_series(1, %(n)s)"  # noqa: S608 (a constant)


class Folios:
    """A process's source of folios (module doc): `take` one per sale."""

    def __init__(self, engine: Engine, *, block: int = BLOCK) -> None:
        if block < 1:
            raise ValueError("a block holds at least one folio")
        self._engine = engine
        self._block = block
        self._lock = threading.Lock()
        self._left: deque[int] = deque()

    def take(self) -> int:
        """A folio no other caller (in this or any process) ever gets. Once every `block`
        calls, one autocommit round trip for the next block (the other threads wait for
        it rather than each taking a block of their own)."""
        with self._lock:
            if not self._left:
                rows = fetch_all(self._engine, _BLOCK_SQL, {"n": self._block})
                self._left.extend(sorted(int(value) for (value,) in rows))
            return self._left.popleft()
