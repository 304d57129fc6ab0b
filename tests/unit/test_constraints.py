"""constraints.txt is the lock ./dev installs from: it pins every package the project and
its dev tools need (followed through their own requirements), the build backend and pip,
each within what pyproject.toml allows, and the environment running the tests is exactly
that set."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "loyalty-grpc"


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = Version(version)
    return found


def pyproject() -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return loaded


def declared() -> list[Requirement]:
    project = pyproject()["project"]
    assert isinstance(project, dict)
    return [
        Requirement(text)
        for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


def test_every_declared_requirement_is_pinned_within_its_range() -> None:
    locked = pins()
    build = pyproject()["build-system"]
    assert isinstance(build, dict)
    for requirement in [*declared(), *map(Requirement, build["requires"])]:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is not in constraints.txt (./dev lock)"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt pins {name}=={locked[name]}, outside {requirement}"
        )
    assert "pip" in locked


def _closure(extras: set[str]) -> set[str]:
    """Every distribution the installed project needs, following requirements (with their
    markers) through the installed metadata."""
    seen: set[str] = set()
    todo: list[tuple[str, set[str]]] = [(PROJECT, extras)]
    while todo:
        name, wanted = todo.pop()
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            environment = [{"extra": extra} for extra in wanted or {""}]
            if requirement.marker and not any(
                requirement.marker.evaluate(env) for env in environment
            ):
                continue
            key = canonicalize_name(requirement.name)
            if key not in seen:
                seen.add(key)
                todo.append((requirement.name, set(requirement.extras)))
    return seen


def test_everything_the_project_needs_is_pinned() -> None:
    try:
        needed = _closure({"dev"})
    except metadata.PackageNotFoundError as exc:
        pytest.fail(f"not installed: {exc} (run ./dev to install from constraints.txt)")
    missing = needed - set(pins())
    assert not missing, f"not in constraints.txt: {sorted(missing)} (run ./dev lock)"


def test_the_environment_is_the_lock() -> None:
    """Each pinned package that is installed has the pinned version: ./dev installed from
    the lock (a stale .venv reinstalls when constraints.txt is newer than its stamp)."""
    installed: dict[str, Version] = {
        canonicalize_name(dist.metadata["Name"]): Version(dist.version)
        for dist in metadata.distributions()
    }
    different = {
        name: f"{installed[name]} installed, {version} pinned"
        for name, version in pins().items()
        if name in installed and installed[name] != version
    }
    assert not different, different
