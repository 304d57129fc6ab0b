"""How much memory this machine gives a process: its physical memory, or the memory limit of
its control group (a container's `--memory`, a systemd unit's `MemoryMax=`) when that is
smaller. Settings that follow the machine's memory read it here (Envoy's heap budget:
runtime/settings.py).

Control groups are found the way the kernel lists them: /proc/self/cgroup names this
process's group in each hierarchy, /proc/self/mountinfo where each hierarchy is mounted
(cgroup v2: one `cgroup2` mount; v1: the `cgroup` mount with the `memory` controller). The
limit is the smallest of the group's and its ancestors' (v2 `memory.max`, v1
`memory.limit_in_bytes`) that can be read; a group not visible under the mount (another
cgroup namespace) is looked up through its ancestors that are. "max", or a value at least
the physical memory, means no limit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")
V2_LIMIT = "memory.max"
V1_LIMIT = "memory.limit_in_bytes"


def physical_memory() -> int:
    """Bytes of physical memory of the machine."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class CgroupMount:
    """Where a cgroup hierarchy is mounted: `root` is the group shown at `mount_point`."""

    root: PurePosixPath
    mount_point: Path
    limit_file: str  # memory.max (v2) or memory.limit_in_bytes (v1)


def memory_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup mounts of /proc/self/mountinfo that can hold a memory limit: every
    `cgroup2` mount, and every v1 `cgroup` mount with the memory controller."""
    mounts: list[CgroupMount] = []
    for line in mountinfo.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point = PurePosixPath(fields[3]), Path(fields[4])
        kind, options = tail[0], tail[2].split(",")
        if kind == "cgroup2":
            mounts.append(CgroupMount(root, mount_point, V2_LIMIT))
        elif kind == "cgroup" and "memory" in options:
            mounts.append(CgroupMount(root, mount_point, V1_LIMIT))
    return mounts


def process_groups(cgroup: str) -> dict[str, PurePosixPath]:
    """This process's group per hierarchy in /proc/self/cgroup: "v2" for the unified
    hierarchy (`0::/path`), "v1" for the one with the memory controller."""
    groups: dict[str, PurePosixPath] = {}
    for line in cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            groups["v2"] = PurePosixPath(path)
        elif "memory" in controllers.split(","):
            groups["v1"] = PurePosixPath(path)
    return groups


def _group_folders(mount: CgroupMount, group: PurePosixPath) -> Iterator[Path]:
    """The group's folder under the mount, then each ancestor's up to the mount point."""
    try:
        relative = group.relative_to(mount.root)
    except ValueError:
        return
    parts = relative.parts
    for depth in range(len(parts), -1, -1):
        yield mount.mount_point.joinpath(*parts[:depth])


def _read_limit(text: str | None) -> int | None:
    if text is None:
        return None
    value = text.strip()
    return int(value) if value.isdigit() else None  # "max": none


def cgroup_memory_limit(
    mountinfo: str, cgroup: str, read: Callable[[Path], str | None]
) -> int | None:
    """The smallest memory limit of this process's groups and their ancestors (bytes),
    None when there is none; `read` gives a file's text (None when it cannot be read)."""
    groups = process_groups(cgroup)
    limits: list[int] = []
    for mount in memory_mounts(mountinfo):
        group = groups.get("v2" if mount.limit_file == V2_LIMIT else "v1")
        if group is None:
            continue
        for folder in _group_folders(mount, group):
            limit = _read_limit(read(folder / mount.limit_file))
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def available_memory() -> int:
    """Bytes of memory this process may use: the machine's physical memory, or its
    control group's limit when that is smaller (Linux; elsewhere the physical memory)."""
    physical = physical_memory()
    mountinfo, cgroup = _read_text(PROC_MOUNTINFO), _read_text(PROC_CGROUP)
    if mountinfo is None or cgroup is None:
        return physical
    limit = cgroup_memory_limit(mountinfo, cgroup, _read_text)
    return physical if limit is None else min(limit, physical)


__all__ = [
    "CgroupMount",
    "available_memory",
    "cgroup_memory_limit",
    "memory_mounts",
    "physical_memory",
    "process_groups",
]
