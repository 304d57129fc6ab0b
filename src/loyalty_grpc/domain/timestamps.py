"""Timestamps as the contract writes them: ISO 8601 UTC with `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def format_iso_utc(moment: datetime) -> str:
    """`2026-11-21T21:16:52.123Z`: UTC, millisecond precision. Naive values are UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
