"""runtime/memory.py: the memory a process may use, from the machine and its cgroup (v1,
v2, both mounted, a group in another namespace), read from made-up /proc files."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from loyalty_grpc.runtime import memory
from loyalty_grpc.runtime.memory import CgroupMount, cgroup_memory_limit, memory_mounts

GiB = 1024**3

V2_MOUNT = (
    "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n"
)
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


def files(found: dict[str, str]):
    return lambda path: found.get(str(path))


def test_the_mounts_that_can_hold_a_memory_limit() -> None:
    assert memory_mounts(V2_MOUNT) == [
        CgroupMount(PurePosixPath("/"), Path("/sys/fs/cgroup"), "memory.max")
    ]
    assert memory_mounts(V1_MOUNTS) == [
        CgroupMount(PurePosixPath("/"), Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
        CgroupMount(PurePosixPath("/"), Path("/sys/fs/cgroup/unified"), "memory.max"),
    ]
    assert memory_mounts("garbage\n\n36 31 0:1 / /x rw - ext4 /dev/sda rw\n") == []


def test_a_systemd_units_limit_and_its_slices() -> None:
    """cgroup v2: the unit's memory.max, or a smaller one of a slice above it."""
    cgroup = "0::/system.slice/loyalty-gateway.service\n"
    unit = "/sys/fs/cgroup/system.slice/loyalty-gateway.service/memory.max"
    assert cgroup_memory_limit(V2_MOUNT, cgroup, files({unit: str(2 * GiB)})) == 2 * GiB
    both = {unit: str(2 * GiB), "/sys/fs/cgroup/system.slice/memory.max": str(GiB)}
    assert cgroup_memory_limit(V2_MOUNT, cgroup, files(both)) == GiB
    assert cgroup_memory_limit(V2_MOUNT, cgroup, files({unit: "max\n"})) is None


def test_a_container_sees_its_own_group_at_the_root() -> None:
    """A cgroup namespace: the process's group is "/", the limit in the mount's root."""
    found = files({"/sys/fs/cgroup/memory.max": "536870912\n"})
    assert cgroup_memory_limit(V2_MOUNT, "0::/\n", found) == 512 * 1024**2


def test_cgroup_v1_and_a_group_not_visible_under_the_mount() -> None:
    """v1 (memory controller) beside an empty v2; the group's own folder is missing (another
    namespace): its visible ancestors count, "no limit" is a huge number."""
    cgroup = "4:memory:/process_api/abc\n0::/\n1:cpu:/x\n"
    unlimited = files({"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"})
    assert cgroup_memory_limit(V1_MOUNTS, cgroup, unlimited) == 9223372036854771712
    limited = files({"/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": str(GiB)})
    assert cgroup_memory_limit(V1_MOUNTS, cgroup, limited) == GiB
    assert cgroup_memory_limit(V1_MOUNTS, cgroup, files({})) is None


def test_a_group_outside_the_mounted_root_is_ignored() -> None:
    mount = "30 23 0:26 /lxc/box /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    found = files({"/sys/fs/cgroup/memory.max": str(GiB)})
    assert cgroup_memory_limit(mount, "0::/elsewhere\n", found) is None
    assert cgroup_memory_limit(mount, "0::/lxc/box\n", found) == GiB


def test_available_memory_is_the_smaller_of_the_machine_and_its_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "physical_memory", lambda: 8 * GiB)
    texts = {
        memory.PROC_MOUNTINFO: V2_MOUNT,
        memory.PROC_CGROUP: "0::/\n",
        Path("/sys/fs/cgroup/memory.max"): str(2 * GiB),
    }
    monkeypatch.setattr(memory, "_read_text", texts.get)
    assert memory.available_memory() == 2 * GiB
    texts[Path("/sys/fs/cgroup/memory.max")] = str(64 * GiB)
    assert memory.available_memory() == 8 * GiB
    del texts[memory.PROC_MOUNTINFO]  # not Linux
    assert memory.available_memory() == 8 * GiB


def test_this_machine() -> None:
    assert 0 < memory.available_memory() <= memory.physical_memory()
