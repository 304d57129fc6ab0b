"""Child processes that die with their parent, on Linux: the parent-death signal.

`die_with_parent(command)` is `command` run through a small helper that sets the
parent-death signal (prctl(2), PR_SET_PDEATHSIG: SIGTERM) and then execs the command in
its own place (same pid). The kernel sends that signal when the parent goes away, however
it goes (a crash, SIGKILL, the OOM killer), so the child never outlives it as an orphan
holding its port. A parent that died before the signal was set (it would never come then)
is noticed: the helper's parent is no longer the process that started it, and the command
is not run.

Why a helper and not a `preexec_fn` that calls prctl: with any preexec_fn, subprocess
calls fork() instead of vfork(), which runs gRPC's fork handlers when gRPC is in use in
the same process (the tests' in-process server, a channel), and those sometimes kill the
child before it execs (Envoy aborting at start on an epoll error; a no-op preexec_fn
loses about 2 children in 100 under gRPC load). The helper starts like any command; it
costs one interpreter start (about 15 ms: no site, no import but ctypes).

The kernel sends the signal when the *thread* that started the child exits, not the
process: start such a child from a thread that lives as long as the child should (the
main thread in `loyalty up` and `loyalty gateway run`), never from a short-lived thread.

Elsewhere than Linux there is no such signal: the command is returned unchanged.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The exit code of a child whose parent died before the signal was set (nobody reads it).
ORPHANED_EXIT = 1

# argv: the parent's pid, the signal, the command.
_HELPER = f"""\
import ctypes, os, sys
parent, signum, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
prctl = ctypes.CDLL(None, use_errno=True).prctl
prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
if prctl({PR_SET_PDEATHSIG}, signum, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != parent:
    sys.exit({ORPHANED_EXIT})
try:
    os.execv(command[0], command)
except OSError as exc:
    sys.exit(f"cannot run {{command[0]}}: {{exc}}")
"""


def die_with_parent(command: list[str], signum: signal.Signals = signal.SIGTERM) -> list[str]:
    """`command`, run so that it receives `signum` when the calling thread exits (see the
    module docstring). Build it right before starting the child: it names this process
    as the parent."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _HELPER, str(os.getpid()), str(int(signum)), *command]


__all__ = ["ORPHANED_EXIT", "die_with_parent"]
