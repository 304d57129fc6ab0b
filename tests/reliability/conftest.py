"""One `loyalty up` per test module, on a fresh database of the session's PostgreSQL (the
PostgreSQL test module overrides `stack` with a server of its own)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.reliability.harness import Journal, Stack, World, running_stack


@pytest.fixture(scope="module")
def stack(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with running_stack(create_database(), tmp_path_factory.mktemp("rel"), World.make()) as up:
        yield up


@pytest.fixture
def journal() -> Journal:
    return Journal()
