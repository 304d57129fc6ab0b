"""What `gateway reload` chose outlives a restart, field by field, and the latest decision
wins (runtime/gateway/reloaded.py). The e2e proof with a real `gateway run`:
tests/e2e/test_gateway_restart.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from loyalty_grpc.runtime.gateway.config import GatewaySpec
from loyalty_grpc.runtime.gateway.reloaded import load, note_reload, record_path, resume
from loyalty_grpc.runtime.gateway.shape import EnvoyError

A, B, C = Path("/srv/gateway-a"), Path("/srv/gateway-b"), Path("/srv/gateway-c")
U1, U2, U3 = ("10.0.0.1:50051",), ("10.0.0.2:50051",), ("10.0.0.3:50051",)


def spec(gateway_dir: Path, upstreams: tuple[str, ...]) -> GatewaySpec:
    return GatewaySpec(http_port=8080, upstreams=upstreams, gateway_dir=gateway_dir)


def restart(work: Path, gateway_dir: Path, upstreams: tuple[str, ...]) -> GatewaySpec:
    resumed = resume(spec(gateway_dir, upstreams), work)
    resumed.commit(work)
    return resumed.spec


def test_no_reload_no_record(tmp_path: Path):
    resumed = resume(spec(A, U1), tmp_path)
    assert (resumed.spec, resumed.notes) == (spec(A, U1), ())
    resumed.commit(tmp_path)
    assert not record_path(tmp_path).exists()


def test_a_reloaded_folder_stands_while_the_start_command_is_unchanged(tmp_path: Path):
    note_reload(tmp_path, spec(A, U1), spec(B, U1))
    for _ in range(2):  # every restart, not only the first
        resumed = resume(spec(A, U1), tmp_path)
        assert resumed.spec == spec(B, U1)
        [note] = resumed.notes
        assert note.startswith(f"gateway folder {B}, set by `gateway reload` at ")
        assert f"the start command says {A}" in note
        resumed.commit(tmp_path)


def test_a_changed_start_command_wins_and_the_reload_is_forgotten(tmp_path: Path):
    note_reload(tmp_path, spec(A, U1), spec(B, U1))
    resumed = resume(spec(C, U1), tmp_path)
    assert resumed.spec == spec(C, U1)
    [note] = resumed.notes
    assert note.startswith(f"gateway folder {C} as the start command says")
    assert f"`gateway reload` set {B}" in note
    resumed.commit(tmp_path)
    assert load(tmp_path) is None
    assert restart(tmp_path, A, U1) == spec(A, U1)


def test_each_field_is_decided_on_its_own(tmp_path: Path):
    """A reload of the folder, then the environment file's list of servers changed and
    applied with a reload: a restart keeps the folder and serves the new list."""
    note_reload(tmp_path, spec(A, U1), spec(B, U1))
    note_reload(tmp_path, spec(B, U1), spec(B, U2))
    assert restart(tmp_path, A, U2) == spec(B, U2)
    # A reload of the servers alone, the start command unchanged: it stands too.
    note_reload(tmp_path, spec(B, U2), spec(B, U3))
    assert restart(tmp_path, A, U2) == spec(B, U3)


def test_later_reloads_keep_what_the_start_command_said(tmp_path: Path):
    note_reload(tmp_path, spec(A, U1), spec(B, U1))
    note_reload(tmp_path, spec(B, U1), spec(C, U1))
    assert restart(tmp_path, A, U1) == spec(C, U1)
    # Reloaded back to the start command's folder: nothing left to remember.
    note_reload(tmp_path, spec(C, U1), spec(A, U1))
    assert load(tmp_path) is None


def test_a_damaged_record_is_refused(tmp_path: Path):
    record_path(tmp_path).write_text("{not json", encoding="utf-8")
    with pytest.raises(EnvoyError, match=r"reloaded\.json is damaged .*: delete it"):
        resume(spec(A, U1), tmp_path)
