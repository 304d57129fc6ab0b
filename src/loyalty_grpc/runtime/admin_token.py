"""The back-office admin token: LOYALTY_ADMIN_TOKEN, else the file `<data dir>/admin_token`
that `loyalty up` creates (mode 0600) and `loyalty admin` reads. The generated token is 32
random bytes (43 characters), far above domain/secret_strength.py's floor; `up` refuses a
weak token found in that file like a weak LOYALTY_ADMIN_TOKEN."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from loyalty_grpc.domain import secret_strength
from loyalty_grpc.runtime.settings import ConfigError

FILENAME = "admin_token"
TOKEN_BYTES = 32


def admin_token_path(data_dir: Path) -> Path:
    return Path(data_dir) / FILENAME


def read_admin_token(data_dir: Path) -> str | None:
    """The token kept in the data dir, or None when there is none (or it is empty)."""
    try:
        token = admin_token_path(data_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return token or None


def ensure_admin_token(data_dir: Path) -> str:
    """The token kept in the data dir, created (random, readable by the owner only) when
    missing. The file appears complete or not at all (written aside, then hard-linked into
    place), so two processes starting at once agree on one token."""
    existing = read_admin_token(data_dir)
    if existing is not None:
        return _strong(existing, data_dir)
    path = admin_token_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILENAME}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(token + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            existing = read_admin_token(data_dir)
            if existing is not None:
                return _strong(existing, data_dir)
            os.replace(tmp, path)  # an empty file was left behind: replace it
    finally:
        Path(tmp).unlink(missing_ok=True)
    return token


def _strong(token: str, data_dir: Path) -> str:
    """`token` from the file, or ConfigError when it is weak (a hand-edited file): the
    message names the file, never the token."""
    verdict = secret_strength.weakness(token)
    if verdict is not None:
        raise ConfigError(
            f"{admin_token_path(data_dir)}: the back-office token must be "
            f"{secret_strength.reason(verdict)}; delete the file and `up` generates one"
        )
    return token
