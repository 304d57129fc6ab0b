"""docker-compose.yml's variables as Compose reads them: an env file's keys and the
substitution of `${...}` references (tests/unit/test_compose.py and
tests/integration/test_compose_schema.py)."""

from __future__ import annotations

import re
from pathlib import Path

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
REFERENCE = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")


def env_file_keys(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def interpolate(text: str, values: dict[str, str]) -> str:
    """Compose's variable substitution, as far as this file uses it."""

    def one(match: re.Match[str]) -> str:
        name, operator, argument = match.groups()
        if values.get(name):
            return values[name]
        if operator and operator.endswith("?"):
            raise AssertionError(f"{name} unset: {argument}")
        return argument or ""

    return REFERENCE.sub(one, text.replace("$$", "\0")).replace("\0", "$")
