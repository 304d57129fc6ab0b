"""What Envoy runs: the gateway configuration split for file-based xDS in a work
directory, so that it can change without a restart (runtime/gateway/reload.py).

In the work directory (`WorkDir`), `bootstrap.yaml` is envoy.yaml without
`static_resources` plus `dynamic_resources` naming `xds/lds.yaml` (the listeners) and
`xds/cds.yaml` (the clusters), and the files the listener reads are copied to `assets/`
under content-hashed names. `envoy.yaml` there is the same configuration as one static
file: the one `envoy --mode validate` checks. Every file Envoy reads is replaced whole
(`write_atomic`). Rendering and validation: runtime/gateway/config.py.

Envoy's admin interface is the Unix socket `admin/envoy.sock` (mode 0600) in the folder
`admin/`, which `install` creates with mode 0700 and owned by this user: nobody else can
even reach the socket (runtime/gateway/side_listeners.py `admin_pipe`).

With TLS, `sds/tls_certificate.yaml` is the SDS file of the listener's certificate (a Secret
naming the operator's PEM files, which Envoy watches itself: envoy_config.tls_secret); with
mutual TLS to the servers, `sds/upstream_certificate.yaml` and `sds/upstream_ca.yaml`
likewise (envoy_config.upstream_secrets).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.gateway.admin import EnvoyAdmin
from loyalty_grpc.runtime.gateway.config import (
    DEFAULT_HTTP_PORT,
    DEFAULT_UPSTREAM,
    GatewaySpec,
    file_references,
    find_gateway_dir,
    validate,
)
from loyalty_grpc.runtime.gateway.shape import (
    CONFIG_NAME,
    EnvoyError,
)
from loyalty_grpc.runtime.gateway.side_listeners import series_socket
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
    tls_secret,
    upstream_secrets,
)
from loyalty_grpc.runtime.settings import GrpcTls

LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


@dataclass(frozen=True)
class WorkDir:
    """Envoy's work directory: what it runs, and what a reload needs."""

    path: Path

    @property
    def static(self) -> Path:
        """The running configuration as one static file (what validate checked)."""
        return self.path / CONFIG_NAME

    @property
    def bootstrap(self) -> Path:
        """What Envoy runs (`-c`)."""
        return self.path / "bootstrap.yaml"

    @property
    def listeners(self) -> Path:
        return self.path / "xds" / "lds.yaml"

    @property
    def clusters(self) -> Path:
        return self.path / "xds" / "cds.yaml"

    @property
    def tls_secret(self) -> Path:
        """The SDS file of the listener's certificate (with TLS only)."""
        return self.path / "sds" / "tls_certificate.yaml"

    @property
    def upstream_sds(self) -> tuple[Path, Path]:
        """The SDS files of mutual TLS to the servers: Envoy's certificate, the CA."""
        return (
            self.path / "sds" / "upstream_certificate.yaml",
            self.path / "sds" / "upstream_ca.yaml",
        )

    @property
    def assets(self) -> Path:
        """Content-hashed copies of the files the listener reads."""
        return self.path / "assets"

    @property
    def candidate(self) -> Path:
        """Where a new generation is validated before anything Envoy reads changes."""
        return self.path / "candidate"

    @property
    def spec(self) -> Path:
        return self.path / "gateway.json"

    @property
    def admin_dir(self) -> Path:
        """The folder of the admin socket: mode 0700, this user's (`secure_admin_dir`)."""
        return self.path / "admin"

    @property
    def admin_socket(self) -> Path:
        """Envoy's admin interface (a Unix socket, mode 0600)."""
        return self.admin_dir / "envoy.sock"

    @property
    def legacy_admin_address(self) -> Path:
        """Where a version whose admin interface was a TCP port wrote its address: its
        Envoy may still run from here until restarted."""
        return self.path / "admin_address"

    @property
    def series_socket(self) -> Path:
        """The supervisor's series server (runtime/gateway/series.py), beside the admin
        socket."""
        return series_socket(self.admin_socket)

    @property
    def reloads_file(self) -> Path:
        """How many `gateway reload`s changed what Envoy runs since it was installed."""
        return self.path / "reloads"

    def reloads(self) -> int:
        """The count of `reloads_file` (0 when there is none)."""
        try:
            return int(self.reloads_file.read_text(encoding="ascii").strip() or "0")
        except FileNotFoundError:
            return 0

    def count_reload(self) -> None:
        """One more reload (call it holding `locked`)."""
        write_atomic(self.reloads_file, f"{self.reloads() + 1}\n".encode())

    def admin(self) -> EnvoyAdmin:
        return EnvoyAdmin(self.admin_socket)

    def secure_admin_dir(self) -> None:
        """Create `admin_dir` with mode 0700 (or set it), and refuse one another user
        owns: the socket's own mode is only as good as the folder around it."""
        self.admin_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.admin_dir.is_symlink() or self.admin_dir.stat().st_uid != os.getuid():
            raise EnvoyError(
                f"{self.admin_dir} is not a folder of this user: it holds Envoy's admin "
                "socket, remove it and start again"
            )
        self.admin_dir.chmod(0o700)

    @property
    def log(self) -> Path:
        return self.path / "envoy.log"

    def load_spec(self) -> GatewaySpec:
        try:
            return GatewaySpec.from_json(self.spec.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise EnvoyError(
                f"{self.path} holds no gateway started by `loyalty` (no {self.spec.name})"
            ) from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise EnvoyError(f"{self.spec} is damaged ({exc}): restart the gateway") from exc

    def clear(self) -> None:
        """After its Envoy stopped cleanly: remove what only a running gateway uses (the
        rendered configuration, the xDS and SDS files, the assets, the spec a reload or
        `gateway check` would read, the admin socket and its folder, an earlier
        version's admin address), so that nothing in the folder claims a gateway still
        runs from it. The log (envoy.log) stays for the operator, and the lock file. Does
        nothing while an Envoy answers on the admin socket."""
        if not self.path.is_dir():
            return
        with self.locked():
            if self.admin().answers():
                return
            for file in (
                self.static,
                self.bootstrap,
                self.spec,
                self.legacy_admin_address,
                self.reloads_file,
            ):
                file.unlink(missing_ok=True)
            for folder in (
                self.listeners.parent,
                self.tls_secret.parent,
                self.assets,
                self.candidate,
                self.admin_dir,
            ):
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One writer at a time (a start, a reload), also across processes."""
        self.path.mkdir(parents=True, exist_ok=True)
        with (self.path / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Generation:
    """One rendering of the gateway folder, as Envoy runs it."""

    static: dict[str, Any]  # the whole configuration in one file: what validate checks
    bootstrap: dict[str, Any]  # static without static_resources, with dynamic_resources
    listeners: dict[str, Any]  # a DiscoveryResponse: xds/lds.yaml
    clusters: dict[str, Any]  # a DiscoveryResponse: xds/cds.yaml
    secret: dict[str, Any] | None = None  # with TLS, a DiscoveryResponse: sds/...yaml
    # With mutual TLS to the servers: each SDS file and what it holds.
    upstream_secrets: dict[Path, dict[str, Any]] = dataclasses.field(default_factory=dict)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` so that a reader (Envoy) sees the old file or the new one, never part
    of one: a temporary file in the same folder, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, 0o644)  # mkstemp's 0600 would hide it from Envoy run by another user
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def dump_yaml(document: dict[str, Any], header: str = "") -> bytes:
    return (header + yaml.safe_dump(document, sort_keys=False)).encode()


def _content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _hashed_copy(source: Path, directory: Path) -> Path:
    """`source` copied into `directory` under a name that changes with its content."""
    data = source.read_bytes()
    target = directory / f"{source.stem}-{_content_hash(data)}{source.suffix}"
    if not target.is_file():
        write_atomic(target, data)
    return target


def _watched(path: Path) -> dict[str, Any]:
    """An xDS config source: the file `path`, re-read whenever a file is renamed into its
    folder (the rename of `write_atomic`)."""
    return {
        "path_config_source": {"path": str(path), "watched_directory": {"path": str(path.parent)}},
        "resource_api_version": "V3",
    }


def _discovery_response(type_url: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    """The resources as a DiscoveryResponse whose version is their content hash."""
    content = json.dumps(resources, sort_keys=True).encode()
    return {
        "version_info": _content_hash(content),
        "resources": [{"@type": type_url, **resource} for resource in resources],
    }


def render_generation(spec: GatewaySpec, work: WorkDir) -> Generation:
    """Render `spec` for xDS. The files the listener reads are copied into work/assets
    under content-hashed names: Envoy reads them only when it builds a listener, so a
    changed descriptor set or Lua script must change the listener (its file names)."""
    tls = spec.tls
    upstream_tls = spec.upstream_tls
    static = spec.render(
        admin_socket=work.admin_socket,
        tls_secret_path=work.tls_secret if tls is not None else None,
        upstream_sds=work.upstream_sds if upstream_tls is not None else None,
    )
    for holder, key in file_references(static):
        holder[key] = str(_hashed_copy(Path(holder[key]), work.assets))
    resources = static["static_resources"]
    unsupported = sorted(set(resources) - {"listeners", "clusters"})
    if "dynamic_resources" in static:
        unsupported.append("dynamic_resources")
    if unsupported:
        raise EnvoyError(
            f"{CONFIG_NAME}: only static_resources listeners and clusters are "
            f"supported, not {', '.join(unsupported)}"
        )
    bootstrap = {key: value for key, value in static.items() if key != "static_resources"}
    bootstrap["dynamic_resources"] = {
        "lds_config": _watched(work.listeners),
        "cds_config": _watched(work.clusters),
    }
    return Generation(
        static=static,
        bootstrap=bootstrap,
        listeners=_discovery_response(LISTENER_TYPE, resources["listeners"]),
        clusters=_discovery_response(CLUSTER_TYPE, resources["clusters"]),
        secret=tls_secret(tls) if tls is not None else None,
        upstream_secrets=(
            dict(zip(work.upstream_sds, upstream_secrets(upstream_tls), strict=True))
            if upstream_tls is not None
            else {}
        ),
    )


def prepare_generation(spec: GatewaySpec, work: WorkDir) -> Generation:
    """Render `spec` and validate it; raises EnvoyError with Envoy's message. Nothing
    Envoy reads changes (only new assets appear).

    What is validated is the static form: `envoy --mode validate` does not load dynamic
    resources, and the bootstrap with the listeners and clusters is exactly that file."""
    generation = render_generation(spec, work)
    # The SDS files name the same files for the life of a gateway (a reload keeps its TLS
    # files): each is rewritten only when it is new.
    secrets = dict(generation.upstream_secrets)
    if generation.secret is not None:
        secrets[work.tls_secret] = generation.secret
    for path, document in secrets.items():
        data = dump_yaml(document)
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data)
    candidate = work.candidate / CONFIG_NAME
    write_atomic(candidate, dump_yaml(generation.static))
    validate(candidate)
    return generation


def _static_header(spec: GatewaySpec) -> str:
    return (
        f"# Rendered from {spec.gateway_dir / CONFIG_NAME} by loyalty_grpc.runtime.gateway.xds;"
        " do not edit.\n"
        "# Envoy runs it split as bootstrap.yaml + xds/lds.yaml + xds/cds.yaml (beside this"
        " file),\n# so that `loyalty gateway reload` can change it live; this one-file form"
        " is what\n# `envoy --mode validate` checked. The comments are in the source.\n"
    )


def commit_generation(generation: Generation, spec: GatewaySpec, work: WorkDir) -> None:
    """Record the generation Envoy now runs: its static form, the spec a reload reuses,
    and only the assets it uses."""
    write_atomic(work.static, dump_yaml(generation.static, _static_header(spec)))
    write_atomic(work.spec, spec.to_json().encode())
    prune_assets(generation.static, work)


def prune_assets(static: dict[str, Any], work: WorkDir) -> None:
    """Delete the assets `static` does not use (those of older or refused generations)."""
    used = {Path(holder[key]).name for holder, key in file_references(static)}
    for path in work.assets.iterdir():
        if path.name not in used:
            path.unlink(missing_ok=True)


def install(spec: GatewaySpec, work_dir: Path) -> WorkDir:
    """Render, validate and write a generation for an Envoy about to start; raises
    EnvoyError (with Envoy's message) when the configuration is not valid, or when an
    Envoy already serves from `work_dir` (its admin socket answers: a second one would
    take the socket over and rewrite the files the first one runs)."""
    work = WorkDir(work_dir.resolve())
    with work.locked():
        if work.admin().answers():
            raise EnvoyError(
                f"an Envoy already serves from {work.path} (its admin socket "
                f"{work.admin_socket} answers): stop it, or use another work directory"
            )
        work.secure_admin_dir()
        work.legacy_admin_address.unlink(missing_ok=True)
        work.reloads_file.unlink(missing_ok=True)  # a new gateway has taken none
        generation = prepare_generation(spec, work)
        write_atomic(work.clusters, dump_yaml(generation.clusters))
        write_atomic(work.listeners, dump_yaml(generation.listeners))
        write_atomic(work.bootstrap, dump_yaml(generation.bootstrap))
        commit_generation(generation, spec, work)
    return work


def check_command(
    gateway_dir: Path | None = None,
    work_dir: Path | None = None,
    *,
    tls: TlsFiles | None = None,
    upstream_tls: GrpcTls | None = None,
    trusted_proxies: tuple[str, ...] = (),
) -> int:
    """`loyalty gateway check`: render a gateway folder as Envoy runs it and validate it.

    The folder is the one `gateway reload` would apply: `gateway_dir` if given, else the
    one the gateway started in `work_dir` runs, else the packaged one. A running gateway's
    settings (ports, upstreams, listen address, TLS) are rendered too; otherwise the
    defaults, with `tls` (LOYALTY_TLS_CERT / LOYALTY_TLS_KEY), `upstream_tls`
    (LOYALTY_GRPC_TLS_*) and `trusted_proxies` (LOYALTY_TRUSTED_PROXIES) when given."""
    running = _running_spec(work_dir)
    directory = (
        gateway_dir
        if gateway_dir is not None
        else running.gateway_dir
        if running is not None
        else find_gateway_dir()
    ).resolve()
    spec = (
        dataclasses.replace(running, gateway_dir=directory)
        if running is not None
        else GatewaySpec(
            http_port=DEFAULT_HTTP_PORT,
            upstreams=(DEFAULT_UPSTREAM,),
            gateway_dir=directory,
            tls_cert=tls.cert if tls is not None else None,
            tls_key=tls.key if tls is not None else None,
            trusted_proxies=trusted_proxies,
        ).with_upstream_tls(upstream_tls)
    )
    with tempfile.TemporaryDirectory(prefix="loyalty-envoy-") as tmp:
        try:
            prepare_generation(spec, WorkDir(Path(tmp)))
        except EnvoyError as exc:
            say(f"error: {exc}")
            return 1
    as_run = f" as the gateway in {work_dir} runs it" if running is not None else ""
    say(f"gateway configuration OK: {directory / CONFIG_NAME}{as_run}")
    return 0


def _running_spec(work_dir: Path | None) -> GatewaySpec | None:
    """The settings of the gateway started in `work_dir`, or None when there is none."""
    if work_dir is None:
        return None
    try:
        return WorkDir(work_dir).load_spec()
    except EnvoyError:
        return None


__all__ = [
    "CLUSTER_TYPE",
    "LISTENER_TYPE",
    "Generation",
    "WorkDir",
    "check_command",
    "commit_generation",
    "dump_yaml",
    "install",
    "prepare_generation",
    "prune_assets",
    "render_generation",
    "write_atomic",
]
