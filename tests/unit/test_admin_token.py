"""runtime/admin_token.py: the admin token file in the data dir."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from loyalty_grpc.runtime.admin_token import (
    admin_token_path,
    ensure_admin_token,
    read_admin_token,
)


def test_path_and_missing(tmp_path: Path) -> None:
    assert admin_token_path(tmp_path) == tmp_path / "admin_token"
    assert read_admin_token(tmp_path) is None
    assert read_admin_token(tmp_path / "no" / "such" / "dir") is None


def test_ensure_creates_once_owner_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "nuevo" / ".loyalty"
    token = ensure_admin_token(data_dir)
    assert len(token) >= 40
    path = admin_token_path(data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_admin_token(data_dir) == token
    assert ensure_admin_token(data_dir) == token
    assert [p.name for p in data_dir.iterdir()] == ["admin_token"]  # no temp files left


def test_read_trims_and_treats_empty_as_missing(tmp_path: Path) -> None:
    admin_token_path(tmp_path).write_text("  secreto \n")
    assert read_admin_token(tmp_path) == "secreto"
    admin_token_path(tmp_path).write_text("\n")
    assert read_admin_token(tmp_path) is None
    token = ensure_admin_token(tmp_path)  # an empty file is replaced
    assert read_admin_token(tmp_path) == token
    assert stat.S_IMODE(admin_token_path(tmp_path).stat().st_mode) == 0o600


def test_concurrent_ensure_agrees(tmp_path: Path) -> None:
    barrier = threading.Barrier(8)
    results: list[str] = []

    def run() -> None:
        barrier.wait()
        results.append(ensure_admin_token(tmp_path))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert read_admin_token(tmp_path) == results[0]
