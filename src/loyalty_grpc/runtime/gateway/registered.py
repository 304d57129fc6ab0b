"""Which gateway a data directory's `loyalty status` must check: `gateway run` names its
work directory in `DATA_DIR/gateway-run.json` while it runs, so that `status --data-dir
DIR` (or plain `status` in the data dir's folder, `.loyalty`) finds a gateway started
with `--work-dir` elsewhere, and knows that one should be answering there.

The file is written once Envoy serves and removed by a clean stop (SIGTERM, `systemctl
stop`): a gateway stopped on purpose is not expected by status. A `gateway run` killed
(SIGKILL, a crash) leaves it, and status then reports the gateway as missing.
"""

from __future__ import annotations

import json
from pathlib import Path

from loyalty_grpc.runtime.gateway.xds import write_atomic

FILE_NAME = "gateway-run.json"


def registration_path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def register(data_dir: Path, work_dir: Path) -> None:
    """Name `work_dir` (absolute) in `data_dir` (created when missing). OSError when the
    data dir cannot be written."""
    document = {"work_dir": str(work_dir.resolve())}
    write_atomic(registration_path(data_dir), (json.dumps(document) + "\n").encode())


def registered(data_dir: Path) -> Path | None:
    """The work directory a `gateway run` with this data dir named (running, or killed
    before it could clean up); None when there is none or the file is unreadable."""
    try:
        document = json.loads(registration_path(data_dir).read_text(encoding="utf-8"))
        return Path(str(document["work_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unregister(data_dir: Path, work_dir: Path) -> None:
    """After a clean stop: remove the file if it still names `work_dir` (another gateway
    with this data dir may have named its own since)."""
    if registered(data_dir) == work_dir.resolve():
        registration_path(data_dir).unlink(missing_ok=True)


__all__ = ["FILE_NAME", "register", "registered", "registration_path", "unregister"]
