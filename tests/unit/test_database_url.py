"""store/db.py's reading of LOYALTY_DATABASE_URL: libpq's multi-host form reaches psycopg
as libpq's `host=h1,h2 port=p1,p2`, with `target_session_attrs` (docs/deployment.md, High
availability)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from loyalty_grpc.runtime.wallet import SENDER_APPLICATION, sender_url
from loyalty_grpc.store.db import parse_url, sqlalchemy_url


def connect_args(url: str) -> dict[str, object]:
    """What the engine hands psycopg.connect (nothing connects)."""
    engine = create_engine(sqlalchemy_url(url))
    _, kwargs = engine.dialect.create_connect_args(engine.url)
    return {k: v for k, v in kwargs.items() if k != "context"}


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p%40w@db1:5432,db2:5433/loyalty?target_session_attrs=read-write",
        "postgresql://u:p%40w@/loyalty?host=db1:5432&host=db2:5433&target_session_attrs=read-write",
    ],
)
def test_both_spellings_of_several_hosts_reach_psycopg_alike(url: str):
    assert connect_args(url) == {
        "dbname": "loyalty",
        "user": "u",
        "password": "p@w",
        "host": "db1,db2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
    }


def test_one_host_is_read_as_before():
    assert sqlalchemy_url("postgresql://u:p@db:5432/loyalty?sslmode=require") == (
        "postgresql+psycopg://u:p@db:5432/loyalty?sslmode=require"
    )
    assert connect_args("postgresql://u@db/loyalty") == {
        "dbname": "loyalty",
        "user": "u",
        "host": "db",
    }


def test_the_wallet_senders_url_keeps_the_hosts():
    url = parse_url(sender_url("postgresql://u@db1:5432,db2:5433/loyalty"))
    assert url.query == {
        "host": ("db1:5432", "db2:5433"),
        "application_name": SENDER_APPLICATION,
    }


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgresql://u@db1:5432,[::1]:5433/loyalty", "lists HOST"),
        ("postgresql://u@db1:5432,,db2/loyalty", "lists HOST"),
        ("postgresql://u@db1,db2/loyalty?host=db3", "a host= parameter"),
    ],
)
def test_a_host_list_it_cannot_read_is_refused(url: str, why: str):
    with pytest.raises(ValueError, match=why):
        parse_url(url)
