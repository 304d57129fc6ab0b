"""`loyalty gateway reload`: change a running gateway's configuration without a restart.

A gateway started by `loyalty up` or `loyalty gateway run` runs the file-based xDS
generation its work directory holds (runtime/gateway/xds.py: `install`). A reload renders the
gateway folder again (envoy.yaml, envelope.lua, the descriptor set, openapi.json) with the
ports and upstream servers the gateway was started with (or a new list of servers:
`--upstream`, LOYALTY_GATEWAY_UPSTREAMS), validates it, then hands it to Envoy:

1. the clusters' file (xds/cds.yaml) is replaced (written aside, renamed over it) and
   Envoy's admin interface must report its new version, with nothing warming (a changed
   cluster warms until every server in it had its first health check; calls in flight on
   the old one finish there, new calls go to the new one);
2. then the listeners' file (xds/lds.yaml) likewise: Envoy builds the new listener on the
   same socket, new connections get it, open ones close after their next response.

Either file unchanged is left alone. Before anything is swapped, a new list of upstream
servers is checked from this host (`check_upstreams`): each server added must answer its
health check SERVING (start a server before adding it), and at least one of the list must
(otherwise every call would fail). When Envoy refuses a file (or does not take it in time),
every file already swapped is put back, so Envoy and its work directory stay on the
configuration it had, and the reload fails with Envoy's reason. A change outside
listeners and clusters (admin, overload_manager, node) is refused before anything is
swapped: Envoy reads those only at start.

A new folder or list of servers outlives a restart of the gateway (the work directory's
`reloaded.json`, runtime/gateway/reloaded.py): the next `gateway run` serves them unless
its own command line or environment changed them since.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from loyalty_grpc.api.interceptors import POS_SERVICE
from loyalty_grpc.runtime.console import announce
from loyalty_grpc.runtime.gateway.admin import CLUSTERS, LISTENERS, EnvoyAdmin, XdsKind
from loyalty_grpc.runtime.gateway.config import (
    GatewaySpec,
)
from loyalty_grpc.runtime.gateway.reloaded import note_reload
from loyalty_grpc.runtime.gateway.shape import (
    CONFIG_NAME,
    EnvoyError,
)
from loyalty_grpc.runtime.gateway.xds import (
    Generation,
    WorkDir,
    commit_generation,
    dump_yaml,
    prepare_generation,
    prune_assets,
    write_atomic,
)
from loyalty_grpc.runtime.server_health import SERVING, health

# How long Envoy may take to report a swapped file as taken.
APPLY_TIMEOUT = 15.0
POLL_SECONDS = 0.05


class PutBackError(EnvoyError):
    """A refused reload could not be undone: what Envoy runs is unknown."""


@dataclass(frozen=True)
class Reloaded:
    gateway_dir: Path
    upstreams: tuple[str, ...]
    changed: tuple[str, ...]  # "clusters", "listeners": what Envoy took (empty: no change)
    listeners_version: str
    clusters_version: str


@dataclass(frozen=True)
class _Swap:
    """A file replaced during a reload, with what it held before."""

    kind: XdsKind
    path: Path
    previous: bytes


def reload(
    work_dir: Path,
    *,
    gateway_dir: Path | None = None,
    upstreams: tuple[str, ...] | None = None,
    timeout: float = APPLY_TIMEOUT,
) -> Reloaded:
    """Apply the gateway folder (the one the gateway was started with, or `gateway_dir`,
    which becomes the gateway's folder) to the Envoy running on `work_dir`, with its
    upstream servers or `upstreams` (which become its servers).

    Raises EnvoyError when the new configuration is not valid, needs a restart, or Envoy
    refuses it; Envoy then still serves the configuration it had.
    """
    work = WorkDir(work_dir.resolve())
    with work.locked():
        spec = running_spec = work.load_spec()
        running = spec.upstreams
        if gateway_dir is not None:
            spec = dataclasses.replace(spec, gateway_dir=gateway_dir.resolve())
        if upstreams is not None:
            spec = dataclasses.replace(spec, upstreams=upstreams)
        admin = _running_admin(work)
        _check_series_served(spec, work)
        try:
            if upstreams is not None:
                check_upstreams(spec, running=running)
            generation = prepare_generation(spec, work)
            _check_bootstrap_unchanged(generation, work)
            changed = _hand_over(generation, work, admin, timeout)
        except PutBackError:
            raise
        except EnvoyError as exc:
            prune_assets(_load_yaml(work.static), work)  # the refused generation's copies
            raise EnvoyError(
                f"reload refused, Envoy keeps serving its current configuration: {exc}"
            ) from exc
        commit_generation(generation, spec, work)
        note_reload(work.path, running_spec, spec)  # outlives a restart (reloaded.py)
        if changed:
            work.count_reload()  # loyalty_gateway_reloads_total (runtime/gateway/series.py)
    return Reloaded(
        gateway_dir=spec.gateway_dir,
        upstreams=spec.upstreams,
        changed=changed,
        listeners_version=str(generation.listeners["version_info"]),
        clusters_version=str(generation.clusters["version_info"]),
    )


def _load_yaml(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(path.read_bytes())
    return loaded


def _running_admin(work: WorkDir) -> EnvoyAdmin:
    admin = work.admin()
    if admin.ready():
        return admin
    if work.legacy_admin_address.is_file():
        raise EnvoyError(
            f"the gateway running from {work.path} was started by an older version "
            "(its admin interface is a TCP port, now a Unix socket): restart it to run "
            "this version's configuration"
        )
    raise EnvoyError(
        f"no Envoy is serving from {work.path} (its admin socket, {work.admin_socket}, "
        "does not answer, or this user may not open it): is the gateway running with "
        "this --work-dir, as this user?"
    )


def _check_series_served(spec: GatewaySpec, work: WorkDir) -> None:
    """With a metrics listener, this version routes its stats page to the supervisor's
    series server (runtime/gateway/series.py): refuse the reload when the gateway's
    supervisor serves none (started by an earlier version), rather than break the scrape."""
    if spec.metrics_port is None:
        return
    try:
        EnvoyAdmin(work.series_socket).get("/")  # any answer will do (a 404)
    except OSError:
        raise EnvoyError(
            f"the gateway running from {work.path} does not serve the gateway's series "
            f"({work.series_socket} does not answer): it was started by an earlier version; "
            "restart it to run this version's configuration"
        ) from None


def _check_bootstrap_unchanged(generation: Generation, work: WorkDir) -> None:
    running = _load_yaml(work.bootstrap)
    changed = sorted(
        key
        for key in set(running) | set(generation.bootstrap)
        if running.get(key) != generation.bootstrap.get(key)
    )
    if changed:
        raise EnvoyError(
            f"{CONFIG_NAME} changed outside static_resources "
            f"({', '.join(changed)}): Envoy reads that only at start, restart "
            "the gateway to apply it"
        )


def _hand_over(
    generation: Generation, work: WorkDir, admin: EnvoyAdmin, timeout: float
) -> tuple[str, ...]:
    """Swap the clusters, then the listeners (a new route may name a new cluster), each
    once Envoy took the one before; on a refusal put back every file swapped."""
    steps = (
        (CLUSTERS, work.clusters, generation.clusters),
        (LISTENERS, work.listeners, generation.listeners),
    )
    swapped: list[_Swap] = []
    try:
        for kind, path, document in steps:
            data = dump_yaml(document)
            previous = path.read_bytes()
            if data != previous:
                swapped.append(_Swap(kind, path, previous))
                _apply(admin, kind, path, data, timeout)
    except EnvoyError as exc:
        _put_back(swapped, admin, timeout, exc)
        raise
    except OSError as exc:  # the admin interface stopped answering, a file write failed
        _put_back(swapped, admin, timeout, exc)
        raise EnvoyError(f"{exc} (admin {admin})") from exc
    return tuple(swap.kind.name for swap in swapped)


def _apply(admin: EnvoyAdmin, kind: XdsKind, path: Path, data: bytes, timeout: float) -> None:
    """Replace `path` with `data` and wait until Envoy reports its version in use."""
    version = str(yaml.safe_load(data)["version_info"])
    rejected = kind.rejected(admin.xds_stats())
    since = datetime.now(UTC) - timedelta(seconds=1)
    write_atomic(path, data)
    deadline = time.monotonic() + timeout
    while True:
        stats = admin.xds_stats()
        if kind.rejected(stats) > rejected:
            reasons = admin.update_errors(since) or ["see Envoy's log"]
            raise EnvoyError(f"Envoy refused the new {kind.name}: {'; '.join(reasons)}")
        if kind.version(stats) == version and kind.settled(stats):
            return
        if time.monotonic() > deadline:
            raise EnvoyError(
                f"Envoy did not take the new {kind.name} within {timeout:.0f} s (admin {admin})"
            )
        time.sleep(POLL_SECONDS)


def check_upstreams(spec: GatewaySpec, *, running: tuple[str, ...]) -> None:
    """Raise EnvoyError unless every server of `spec` added to the `running` ones answers
    its health check SERVING from this host (with the gateway's mutual TLS, if any), and
    at least one of them does."""
    answers = {
        target: health(target, tls=spec.upstream_tls, service=POS_SERVICE)
        for target in spec.upstreams
    }
    failing = {target: answer for target, answer in answers.items() if answer != SERVING}
    added = [target for target in failing if target not in running]
    if added or len(failing) == len(answers):
        found = "; ".join(f"{target}: {answer}" for target, answer in failing.items())
        raise EnvoyError(
            f"upstream servers that do not pass their health check ({found}): start a "
            "server before adding it (or leave it out) and reload again"
        )


def _put_back(
    swapped: list[_Swap], admin: EnvoyAdmin, timeout: float, cause: BaseException
) -> None:
    for swap in reversed(swapped):
        try:
            _apply(admin, swap.kind, swap.path, swap.previous, timeout)
        except (EnvoyError, OSError) as exc:
            raise PutBackError(
                f"reload failed ({cause}) and putting back the previous "
                f"{swap.kind.name} failed too ({exc}): check the gateway "
                f"(admin {admin})"
            ) from exc


# ---------------------------------------------------------------- `loyalty gateway reload`


def reload_command(
    work_dir: Path,
    gateway_dir: Path | None = None,
    log_format: str = "text",
    upstreams: tuple[str, ...] | None = None,
) -> int:
    """Reload and say what changed (a log line when the logs are JSON: an operator's
    automation keeps a record of every reload); a refusal raises EnvoyError (`error: …`,
    exit 1)."""
    result = reload(work_dir, gateway_dir=gateway_dir, upstreams=upstreams)
    source = result.gateway_dir / CONFIG_NAME
    servers = f"upstreams {', '.join(result.upstreams)}"
    if not result.changed:
        announce(f"gateway configuration unchanged ({source}; {servers})", log_format)
        return 0
    announce(
        f"gateway reloaded from {source} ({servers}): {' and '.join(result.changed)} "
        f"updated (listeners {result.listeners_version}, clusters "
        f"{result.clusters_version}); new connections use it, open ones switch after "
        "their next response",
        log_format,
    )
    return 0


__all__ = ["APPLY_TIMEOUT", "PutBackError", "Reloaded", "reload", "reload_command"]
