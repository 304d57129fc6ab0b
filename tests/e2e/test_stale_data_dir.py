"""The suite's `loyalty status` tests pass beside a stale `.loyalty`, as after `./dev up
--demo` was killed in the checkout (issue 23): a processes file of a dead supervisor, an
earlier version's admin address with something listening at it, an admin socket file left
by a dead Envoy. Each is enough to make a `status` that reads it say UNHEALTHY; the suite
must read none of them (tests/conftest.py points every default data dir at a folder of its
own). The stale folder is built in a temporary folder, never in the checkout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.e2e.processes import LOYALTY, loyalty_env
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
STATUS_TESTS = ROOT / "tests" / "e2e" / "test_status_workers.py"


def _stale_data_dir(data_dir: Path, legacy_admin: str) -> None:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        gone.wait()
    envoy = data_dir / "envoy"
    (envoy / "admin").mkdir(parents=True)
    (data_dir / "processes.json").write_text(
        json.dumps({"command": "up", "pid": gone.pid, "started": 0, "children": []}),
        encoding="utf-8",
    )
    (envoy / "admin_address").write_text(legacy_admin + "\n", encoding="utf-8")
    # A socket file whose process is gone (bound from its folder: a Unix socket's path is
    # limited to 107 bytes, which a temporary folder's may exceed).
    subprocess.run(
        [sys.executable, "-c", "import socket; socket.socket(socket.AF_UNIX).bind('envoy.sock')"],
        cwd=envoy / "admin",
        check=True,
        timeout=30,
    )
    assert (envoy / "admin" / "envoy.sock").is_socket()


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        str(path.relative_to(folder)): path.read_bytes() if path.is_file() else None
        for path in sorted(folder.rglob("*"))
    }


def test_the_status_tests_pass_beside_a_stale_data_dir(tmp_path: Path):
    checkout = tmp_path / "checkout"  # where a developer runs ./dev test from
    stale = checkout / ".loyalty"
    with socket.socket() as old_admin:  # an earlier version's gateway "still running"
        old_admin.bind(("127.0.0.1", 0))
        old_admin.listen()
        _stale_data_dir(stale, f"127.0.0.1:{old_admin.getsockname()[1]}")
        before = _tree(stale)

        # The stale folder is what `status` finds by default from there: UNHEALTHY.
        env = loyalty_env()
        env.pop("LOYALTY_DATA_DIR", None)
        found = subprocess.run(
            [*LOYALTY, "status", "--target", f"127.0.0.1:{free_port()}"],
            cwd=checkout,
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert found.returncode == 1, found.stdout + found.stderr
        assert "it was killed before it could clean up" in found.stdout
        assert "by an older version (admin on a TCP port): restart it" in found.stdout

        # The suite's status tests, run from there, with the variable pointing there too
        # (their own temporary folders short: Unix socket paths are limited).
        with tempfile.TemporaryDirectory(prefix="stale-") as inner:
            suite = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    str(STATUS_TESTS),
                    "-k",
                    "test_status_of or test_status_says",
                    "-c",
                    str(ROOT / "pyproject.toml"),
                    "--rootdir",
                    str(ROOT),
                    "--basetemp",
                    inner,
                    "-p",
                    "no:cacheprovider",
                    "-q",
                ],
                cwd=checkout,
                env=loyalty_env(LOYALTY_DATA_DIR=str(stale)),
                text=True,
                capture_output=True,
                timeout=280,
                check=False,
            )
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    assert "4 passed" in suite.stdout
    assert _tree(stale) == before  # read by nobody's writes, changed by none
