"""Configuration in one place: every `LOYALTY_*` environment variable, its default and its
check. `Settings.from_env()` reads them once at start; a wrong value stops the command with
one line naming the variable and what it expects (exit code 2) before anything starts.
Command-line flags override the environment (`Settings.with_flags`), checked the same way.

docs/configuration.md's table is generated from `VARIABLES` (scripts/gen_docs.py). The
wallet variables are parsed by `wallet.WalletSettings.from_env` (kept there, next to the
providers that use them) and only listed here.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from sqlalchemy.exc import ArgumentError

from loyalty_grpc.api import failed_checks, key_cache
from loyalty_grpc.api.server_defaults import DEFAULT_HOST, DEFAULT_PORT
from loyalty_grpc.domain import rate_limit, secret_strength
from loyalty_grpc.runtime.logs import FORMATS, LogFormat
from loyalty_grpc.runtime.memory import available_memory
from loyalty_grpc.runtime.process.liveness import LivenessSettings
from loyalty_grpc.services.rate_limit import MAX_BATCH
from loyalty_grpc.store.db import parse_url
from loyalty_grpc.wallet import WalletConfigError, WalletSettings

# The exit code of a configuration error (as argparse uses for a bad flag).
EXIT_CONFIG = 2
# Strict-Transport-Security's max-age with TLS: one year, what HSTS preload lists ask for.
DEFAULT_HSTS_MAX_AGE = 31_536_000
MAX_WORKERS = 64
# Envoy's worker threads by default: one per GATEWAY_CORES_PER_THREAD cores, at least 1.
# Per sale the gateway spends about a quarter of the CPU the whole machine spends (Envoy
# 0.40-0.56 ms against the server's 0.7-1.0 ms and PostgreSQL's 0.55-0.7 ms on the
# reference benchmark, docs/performance.md): a quarter of the cores keeps it from being
# the ceiling on a big machine while the workers wait (issue 28: one thread capped a
# 16-core machine at one busy core), and keeps 1 thread on 2 and 4 cores, where a second
# thread only competes with the workers for the same cores (DESIGN.md §3b).
GATEWAY_CORES_PER_THREAD = 4
MAX_GATEWAY_THREADS = 256
MAX_WORKER_CHECK_MISSES = 1000
# Envoy's heap budget (envoy.yaml's overload_manager sheds load as it fills): by default
# this share of the memory the machine (or its cgroup) gives a process, never less than
# ENVOY_HEAP_MIN_MB, which is several times what Envoy holds idle (about 13 MiB with one
# worker thread) and so the least a budget can be that leaves room for calls.
ENVOY_HEAP_SHARE = 4
ENVOY_HEAP_MIN_MB = 64
ENVOY_HEAP_MAX_MB = 1024 * 1024
MIB = 1024 * 1024
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = FORMATS
# The commands that serve: their host and log-format defaults differ (see VARIABLES).
UP, SERVE, GATEWAY_RUN = "up", "serve", "gateway run"
# The long-running commands a deployment runs (docker-compose, systemd): JSON logs by
# default. The others (up, admin, status, gateway check/reload...) write for a person.
PRODUCTION_COMMANDS = (SERVE, GATEWAY_RUN)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names it and says what is expected."""


# How a hint names the command to the person running it (runtime/console.py).
PROG_VARIABLE = "LOYALTY_PROG"
DEFAULT_PROG = "loyalty"


@dataclass(frozen=True)
class Variable:
    name: str
    # None: the default of its `Settings` field, formatted (`documented_default`); a text
    # only where the default is not one value of the field (computed, a command's, none).
    default: str | None
    meaning: str
    # Words after a derived default, in parentheses ("one year").
    aside: str = ""


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "LOYALTY_DATABASE_URL",
        "embedded PostgreSQL in `DATA_DIR/pgdata`",
        "`postgresql://user:password@host:port/db` of an external server; required by `serve`; "
        "libpq's multi-host form `…@h1:p1,h2:p2/db?target_session_attrs=read-write` follows "
        "a failover ([High availability](deployment.md#high-availability))",
    ),
    Variable(
        "LOYALTY_DATABASE_PASSWORD_FILE",
        "none",
        "a file holding the database password (a systemd credential, a compose secret), "
        "put into `LOYALTY_DATABASE_URL`, which then holds none of its own: one line (its "
        "end of line is dropped), any characters; read at start, never logged",
    ),
    Variable(
        "LOYALTY_ADMIN_TOKEN",
        "`up`: generated into `DATA_DIR/admin_token` (mode 0600); `serve`: required, or "
        "`LOYALTY_ADMIN_TOKEN_FILE`",
        "the back-office token (`./dev admin`, `BackofficeService`), the same on every "
        f"host; printable ASCII, no spaces, at least {secret_strength.MIN_LENGTH} "
        "characters, random: the documented example and values whose characters carry "
        f"under {secret_strength.MIN_BITS} bits (repeats, few different characters) are "
        "refused (`domain/secret_strength.py`)",
    ),
    Variable(
        "LOYALTY_ADMIN_TOKEN_FILE",
        "none",
        "a file holding the back-office token (a mounted secret, a systemd credential), "
        "read when `LOYALTY_ADMIN_TOKEN` is unset",
    ),
    Variable(
        "LOYALTY_DATA_DIR",
        None,
        "embedded PostgreSQL, admin token, Envoy's rendered config, metrics files (`--data-dir`)",
    ),
    Variable(
        "LOYALTY_BACKUP_DIR",
        "none",
        "the backup folder of `backup` (`--dir`): WAL archive in `wal/`, base backups in "
        "`base/`; set for `up`, its embedded PostgreSQL archives its WAL there "
        "([Backups and restore](backups.md))",
    ),
    Variable(
        "LOYALTY_GRPC_HOST",
        f"`{DEFAULT_HOST}`",
        "gRPC listen address, also of `/metrics` (`--grpc-host`); the back office shares "
        "the port, so listening beyond loopback (`0.0.0.0`, for an Envoy on another host) "
        "is a choice to make with a firewall",
    ),
    Variable(
        "LOYALTY_GRPC_PORT",
        None,
        "gRPC port, shared by all workers (`--grpc-port`; 0 = any free port)",
    ),
    Variable("LOYALTY_HTTP_PORT", None, "Envoy's HTTP port (`--http-port`)"),
    Variable(
        "LOYALTY_HTTP_HOST",
        "`127.0.0.1` with plain HTTP, `0.0.0.0` with TLS",
        "Envoy's listen address, `up` and `gateway run` (`--http-host`); with plain HTTP "
        "an address beyond loopback is refused unless `LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK` "
        "says so",
    ),
    Variable(
        "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK",
        None,
        "`1`: let plain HTTP (no `LOYALTY_TLS_CERT`) listen beyond loopback "
        "(`--plain-http-beyond-loopback`), `up` and `gateway run`: API keys and fans' data "
        "then cross the network in clear. For a TLS proxy in front on a private network, "
        "or a container whose published port decides the exposure (docker-compose)",
    ),
    Variable(
        "LOYALTY_TLS_CERT",
        "none (plain HTTP)",
        "PEM certificate chain of Envoy's HTTPS listener, `up` and `gateway run` "
        "(`--tls-cert`); with `LOYALTY_TLS_KEY`, both or neither; the port then serves "
        "HTTPS only (h2 and HTTP/1.1, TLS 1.2+), replacing the files rotates it (see TLS)",
    ),
    Variable(
        "LOYALTY_TLS_KEY",
        "none",
        "PEM private key of that certificate (`--tls-key`), readable by Envoy only",
    ),
    Variable(
        "LOYALTY_HTTP_REDIRECT_PORT",
        "none (no plain HTTP at all)",
        "with TLS only: a plain-HTTP port that forwards nothing, GET/HEAD get a 301 to "
        "https on `LOYALTY_PUBLIC_HOST` (required with it), other methods a 400 "
        "`solicitud_invalida` (`--http-redirect-port`)",
    ),
    Variable(
        "LOYALTY_PUBLIC_HOST",
        "none",
        "the name clients use for the HTTPS API, as in its certificate, `HOST` or "
        "`HOST:PORT` (default port: `LOYALTY_HTTP_PORT`) (`--public-host`): the only host "
        "the redirect port sends clients to, never the request's `Host`",
    ),
    Variable(
        "LOYALTY_HSTS_MAX_AGE",
        None,
        "with TLS: every HTTPS response, Envoy's own replies too, carries "
        "`Strict-Transport-Security: max-age=N`; 0 sends `max-age=0`, which tells "
        "browsers to forget the policy (to leave HTTPS)",
        aside="one year",
    ),
    Variable(
        "LOYALTY_HSTS_INCLUDE_SUBDOMAINS",
        None,
        "`1`: add `includeSubDomains` (every subdomain of the API's host must then serve "
        "HTTPS too)",
    ),
    Variable(
        "LOYALTY_GRPC_TLS_CERT",
        "none (plain gRPC)",
        "mutual TLS on the gRPC port (`--grpc-tls-cert`; with `LOYALTY_GRPC_TLS_KEY` and "
        "`LOYALTY_GRPC_TLS_CA`, all three or none): this process's PEM certificate, which "
        "`serve` presents to its clients and `gateway run` (Envoy), `admin`, `status` and "
        "`gateway reload` present to the server; see Mutual TLS",
    ),
    Variable(
        "LOYALTY_GRPC_TLS_KEY",
        "none",
        "PEM private key of that certificate (`--grpc-tls-key`)",
    ),
    Variable(
        "LOYALTY_GRPC_TLS_CA",
        "none",
        "PEM certificate(s) of the CA that signs every certificate of the gRPC port, and "
        "nothing else (`--grpc-tls-ca`): the server accepts only clients it signed, "
        "clients only servers it signed",
    ),
    Variable(
        "LOYALTY_WORKERS",
        "CPU count",
        f"gRPC worker processes sharing the port, 1 to {MAX_WORKERS} (`--workers`)",
    ),
    Variable(
        "LOYALTY_WORKER_CHECK_SECONDS",
        None,
        "how often the supervising process pings each worker over its own socket pair "
        "(`serve`, `up`); 0 = no checks (a frozen worker is then never replaced)",
    ),
    Variable(
        "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS",
        None,
        "how long a worker has to answer one ping before it counts as missed",
    ),
    Variable(
        "LOYALTY_WORKER_CHECK_MISSES",
        None,
        f"missed pings in a row (1 to {MAX_WORKER_CHECK_MISSES}) after which a worker "
        "counts as frozen: it is killed (SIGKILL) and restarted; the defaults replace a "
        f"frozen worker within about {LivenessSettings().worst_case:.0f} s, before Envoy's "
        "route timeout, and a healthy one would have to go "
        f"{LivenessSettings.misses * LivenessSettings.deadline:g} s without an answer, far "
        "beyond a GC pause or a busy machine's delays (see Supervision in "
        "docs/operations.md)",
    ),
    Variable(
        "LOYALTY_METRICS_PORT",
        None,
        "Prometheus `/metrics` of all workers together (`--metrics-port`; 0 = off)",
    ),
    Variable(
        "LOYALTY_RATE_LIMIT_PER_MINUTE",
        None,
        "calls per minute per API key before `demasiadas_llamadas` (HTTP 429); 0 = no limit",
    ),
    Variable(
        "LOYALTY_RATE_LIMIT_BATCH",
        None,
        "most calls of one key a worker reserves per database round trip; 0 = a tenth "
        f"of the limit, at most {MAX_BATCH}; never more than 1 + the slack (limit // "
        f"{rate_limit.WINDOW_SECONDS} − 2: "
        f"{1 + rate_limit.slack(rate_limit.DEFAULT_CALLS_PER_MINUTE)} calls at "
        f"{rate_limit.DEFAULT_CALLS_PER_MINUTE} a minute); 1 = a round trip per call",
        aside="automatic",
    ),
    Variable(
        "LOYALTY_KEY_CACHE_SECONDS",
        None,
        "how long a worker trusts an API-key lookup and the program terms that come "
        "with it (delay of a revocation or a rate change in other processes); "
        "0 = no cache",
    ),
    Variable(
        "LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE",
        None,
        "key checks that may fail per client address and minute in each worker (unknown "
        "or revoked keys, from the database or the key cache); beyond it, until the "
        "minute passes, a call whose key has not worked recently gets 429 "
        "`demasiadas_llamadas` without a lookup; 0 = no limit",
    ),
    Variable(
        "LOYALTY_TRUSTED_PROXIES",
        "none (the client address is the TCP peer)",
        "`up` and `gateway run` (`--trusted-proxies`): CIDRs of the proxies in front of "
        "Envoy, `10.0.0.0/8,2001:db8::/32`; a request from one of them is counted under the "
        "last address of its `X-Forwarded-For`; `X-Forwarded-For` from anyone else is "
        "ignored",
    ),
    Variable("LOYALTY_LOG_LEVEL", None, f"{', '.join(LOG_LEVELS)} (`--log-level`)"),
    Variable(
        "LOYALTY_LOG_FORMAT",
        "`json` for `serve` and `gateway run` (Envoy's own lines too), `text` for the others",
        "`json` (one object per line) or `text` (`--log-format`)",
    ),
    Variable(
        "LOYALTY_GRPC_TARGET",
        "where `serve` listens on this host: `LOYALTY_GRPC_HOST:LOYALTY_GRPC_PORT` "
        f"(a wildcard host as loopback; `{DEFAULT_HOST}:{DEFAULT_PORT}`)",
        "the server `admin`, `status` and `gateway run` talk to (`HOST:PORT`)",
    ),
    Variable(
        "LOYALTY_GATEWAY_UPSTREAMS",
        "`LOYALTY_GRPC_TARGET` (one server)",
        "`gateway run`: the gRPC servers Envoy forwards to, `HOST:PORT,HOST:PORT,...` "
        "(`--upstream`), health-checked; `gateway reload` applies a new list without a "
        "failed call",
    ),
    Variable(
        "LOYALTY_ENVOY_METRICS_PORT",
        None,
        "`up` and `gateway run`: a listener for Prometheus that answers only `GET "
        "/stats/prometheus` (Envoy's own series and the gateway's, `loyalty_gateway_*`) "
        "and `GET /ready` from Envoy's admin "
        "interface, which is a Unix socket of the work dir (mode 0600), never a port "
        "(`--envoy-metrics-port`)",
        aside="none",
    ),
    Variable(
        "LOYALTY_ENVOY_METRICS_HOST",
        None,
        "the address of that listener (`--envoy-metrics-host`); beyond loopback, the "
        "series name the gateway's clusters and servers",
    ),
    Variable(
        "LOYALTY_ENVOY_ADMIN_PORT",
        "none (retired)",
        "refused with a one-line hint: Envoy's admin interface is a Unix socket now; "
        "Prometheus uses `LOYALTY_ENVOY_METRICS_PORT`",
    ),
    Variable(
        "LOYALTY_ENVOY_HEAP_MB",
        f"1/{ENVOY_HEAP_SHARE} of the machine's memory (of its cgroup's limit when that "
        f"is smaller), at least {ENVOY_HEAP_MIN_MB}",
        "`up` and `gateway run`: Envoy's heap budget in MiB (`--envoy-heap-mb`, "
        f"{ENVOY_HEAP_MIN_MB} to {ENVOY_HEAP_MAX_MB}): from 90 % of it Envoy resets the "
        "HTTP/2 streams holding the most memory, from 95 % it answers new requests 503 "
        "`servicio_no_disponible`, from 98 % it closes new connections (see "
        "docs/security.md); a change needs a restart of the gateway",
    ),
    Variable(
        "LOYALTY_GATEWAY_THREADS",
        f"the CPU count / {GATEWAY_CORES_PER_THREAD}, at least 1 (1 below "
        f"{2 * GATEWAY_CORES_PER_THREAD} cores)",
        "`up` and `gateway run`: Envoy's worker threads (`--gateway-threads`, 1 to "
        f"{MAX_GATEWAY_THREADS}); the gateway spends about a quarter of a sale's CPU, so a "
        "quarter of the cores keeps it from being the ceiling; on a host that runs only "
        "the gateway, its core count (see docs/sizing.md); a change needs a restart of the "
        "gateway",
    ),
    Variable(
        PROG_VARIABLE,
        f"`{DEFAULT_PROG}`",
        "how the commands' help and hints name the command; `./dev` sets `./dev` (its "
        "`.venv/bin/loyalty` is not on the PATH)",
    ),
    Variable(
        "LOYALTY_WALLET_PROVIDER",
        f"`{WalletSettings.provider}`",
        "`local` or `google` (see Wallet pass)",
    ),
    Variable(
        "LOYALTY_WALLET_INTERVAL_SECONDS",
        f"`{WalletSettings.interval:g}`",
        "wallet sender poll interval",
    ),
    Variable("LOYALTY_GOOGLE_WALLET_ISSUER_ID", "none", "Google Wallet issuer id (digits)"),
    Variable(
        "LOYALTY_GOOGLE_WALLET_CREDENTIALS", "none", "path of the Google service account's JSON key"
    ),
    Variable(
        "LOYALTY_GOOGLE_WALLET_API",
        f"`{WalletSettings.api_base}`",
        "Google Wallet API base URL",
    ),
)


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset, `taskset`),
    the machine's count where the platform cannot tell."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(cores: int | None = None) -> int:
    return max(1, min(machine_cores() if cores is None else cores, MAX_WORKERS))


def default_gateway_threads(cores: int | None = None) -> int:
    """Envoy's worker threads when none are configured: a quarter of `cores` (default: this
    machine's), at least 1 (see GATEWAY_CORES_PER_THREAD)."""
    count = machine_cores() if cores is None else cores
    return max(1, min(count // GATEWAY_CORES_PER_THREAD, MAX_GATEWAY_THREADS))


def default_envoy_heap_bytes(memory: int | None = None) -> int:
    """Envoy's heap budget when none is configured: 1/ENVOY_HEAP_SHARE of `memory` (default:
    what this machine or its cgroup gives a process), at least ENVOY_HEAP_MIN_MB, in whole
    MiB."""
    total = available_memory() if memory is None else memory
    return max(ENVOY_HEAP_MIN_MB, total // ENVOY_HEAP_SHARE // MIB) * MIB


# ---------------------------------------------------------------- parsers
# Each takes the text and returns the value, or raises ValueError saying what is expected.


def _integer(low: int, high: int, what: str = "an integer") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise ValueError(f"{what} from {low} to {high}")
        return value

    return parse


_port = _integer(0, 65535, "a port number")
_http_port = _integer(1, 65535, "a port number")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError("a number of seconds, 0 or more")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise ValueError("a number of seconds, more than 0")
    return value


def _choice(options: tuple[str, ...], *, upper: bool) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().upper() if upper else text.strip().lower()
        if value not in options:
            raise ValueError(f"one of {', '.join(options)}")
        return value

    return parse


def _database_url(text: str) -> str:
    if not re.match(r"postgres(ql)?(\+psycopg)?://", text.strip()):
        raise ValueError("a postgresql:// URL")
    try:
        parse_url(text)  # the reading every engine makes of it (store/db.py)
    except (ValueError, ArgumentError):  # their texts can repeat the URL, and its password
        raise ValueError(
            "a postgresql:// URL: user:password@host:port/db, or several host:port separated "
            "by commas (percent-encode @ : / in the password)"
        ) from None
    return text.strip()


def _token(text: str) -> str:
    """The back-office token: one word of printable ASCII, strong by
    domain/secret_strength.py (its error never repeats the token: _Rule.secret)."""
    token = text.strip()
    if not re.fullmatch(r"[!-~]+", token):
        raise ValueError("printable ASCII without spaces (it travels in gRPC metadata)")
    verdict = secret_strength.weakness(token)
    if verdict is not None:
        raise ValueError(secret_strength.reason(verdict))
    return token


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError("1 or 0")
    return value in ("1", "true", "yes")


_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*"


def split_public_host(text: str) -> tuple[str, int | None]:
    """`HOST` or `HOST:PORT` (a DNS name, an IPv4 address or `[IPv6]`) as (host, port or
    None); ValueError otherwise (no scheme, path, user or wildcard: it becomes a URL)."""
    value = text.strip()
    match = re.fullmatch(rf"({_DNS_NAME}|\[[0-9A-Fa-f:.]+\])(?::(\d{{1,5}}))?", value)
    port = int(match.group(2)) if match and match.group(2) else None
    if match is None or port == 0 or (port or 0) > 65535 or len(match.group(1)) > 253:
        raise ValueError("a host name as in the certificate, HOST or HOST:PORT")
    if match.group(1).startswith("["):
        try:
            ipaddress.IPv6Address(match.group(1)[1:-1])
        except ValueError:
            raise ValueError("a host name as in the certificate, HOST or HOST:PORT") from None
    return match.group(1), port


def _public_host(text: str) -> str:
    split_public_host(text)
    return text.strip()


def _host(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9.:\-\[\]_]+", text.strip()):
        raise ValueError("a host name or IP address")
    return text.strip()


def _target(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    try:
        _host(host)
        number = _http_port(port)
    except ValueError:
        number = 0
    if not sep or number == 0:
        raise ValueError("HOST:PORT")
    return text.strip()


def join_target(host: str, port: int) -> str:
    """`HOST:PORT` (`[v6]:PORT` for an IPv6 address): the form `split_target` reads."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_target(target: str) -> tuple[str, int]:
    """A checked `HOST:PORT` (`[v6]:PORT` too) as (host without brackets, port)."""
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port)


def _targets(text: str) -> tuple[str, ...]:
    """`HOST:PORT,HOST:PORT,...`: at least one, each checked, none twice."""
    try:
        targets = tuple(_target(part) for part in text.split(","))
    except ValueError:
        targets = ()
    if not targets or len(set(targets)) != len(targets):
        raise ValueError("HOST:PORT, or several separated by commas (each once)")
    return targets


def _cidrs(text: str) -> tuple[str, ...]:
    """`CIDR,CIDR,...` (an address alone is its /32 or /128), normalized, each once; not
    a range holding every address (it would trust any client's X-Forwarded-For)."""
    networks = []
    for part in text.split(","):
        try:
            network = ipaddress.ip_network(part.strip(), strict=False)
        except ValueError:
            raise ValueError("CIDRs separated by commas (10.0.0.0/8,2001:db8::/32)") from None
        if network.prefixlen == 0:
            raise ValueError(
                f"CIDRs narrower than {network} (trusting every address lets any client "
                "choose the address it is counted under)"
            )
        if str(network) not in networks:
            networks.append(str(network))
    return tuple(networks)


def _path(text: str) -> Path:
    return Path(text.strip()).expanduser()


@dataclass(frozen=True)
class _Rule:
    variable: str
    flag: str | None
    parse: Callable[[str], object]
    # A secret: a wrong value is described, never repeated in the message.
    secret: bool = False


# Settings field -> where it comes from and how it is checked.
_RULES: dict[str, _Rule] = {
    # A secret: the URL may hold the database password.
    "database_url": _Rule("LOYALTY_DATABASE_URL", None, _database_url, secret=True),
    "database_password_file": _Rule("LOYALTY_DATABASE_PASSWORD_FILE", None, _path),
    "admin_token": _Rule("LOYALTY_ADMIN_TOKEN", None, _token, secret=True),
    "admin_token_file": _Rule("LOYALTY_ADMIN_TOKEN_FILE", None, _path),
    "data_dir": _Rule("LOYALTY_DATA_DIR", "--data-dir", _path),
    "backup_dir": _Rule("LOYALTY_BACKUP_DIR", "--dir", _path),
    "grpc_host": _Rule("LOYALTY_GRPC_HOST", "--grpc-host", _host),
    "grpc_port": _Rule("LOYALTY_GRPC_PORT", "--grpc-port", _port),
    "http_port": _Rule("LOYALTY_HTTP_PORT", "--http-port", _http_port),
    "http_host": _Rule("LOYALTY_HTTP_HOST", "--http-host", _host),
    "plain_http_beyond_loopback": _Rule(
        "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK", "--plain-http-beyond-loopback", _switch
    ),
    "tls_cert": _Rule("LOYALTY_TLS_CERT", "--tls-cert", _path),
    "tls_key": _Rule("LOYALTY_TLS_KEY", "--tls-key", _path),
    "http_redirect_port": _Rule("LOYALTY_HTTP_REDIRECT_PORT", "--http-redirect-port", _http_port),
    "public_host": _Rule("LOYALTY_PUBLIC_HOST", "--public-host", _public_host),
    "hsts_max_age": _Rule("LOYALTY_HSTS_MAX_AGE", None, _integer(0, 2**31 - 1, "seconds")),
    "hsts_include_subdomains": _Rule("LOYALTY_HSTS_INCLUDE_SUBDOMAINS", None, _switch),
    "grpc_tls_cert": _Rule("LOYALTY_GRPC_TLS_CERT", "--grpc-tls-cert", _path),
    "grpc_tls_key": _Rule("LOYALTY_GRPC_TLS_KEY", "--grpc-tls-key", _path),
    "grpc_tls_ca": _Rule("LOYALTY_GRPC_TLS_CA", "--grpc-tls-ca", _path),
    "workers": _Rule("LOYALTY_WORKERS", "--workers", _integer(1, MAX_WORKERS)),
    "worker_check_seconds": _Rule("LOYALTY_WORKER_CHECK_SECONDS", None, _seconds),
    "worker_check_deadline_seconds": _Rule(
        "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS", None, _positive_seconds
    ),
    "worker_check_misses": _Rule(
        "LOYALTY_WORKER_CHECK_MISSES", None, _integer(1, MAX_WORKER_CHECK_MISSES)
    ),
    "metrics_port": _Rule("LOYALTY_METRICS_PORT", "--metrics-port", _port),
    "rate_limit_per_minute": _Rule("LOYALTY_RATE_LIMIT_PER_MINUTE", None, _integer(0, 1_000_000)),
    "rate_limit_batch": _Rule("LOYALTY_RATE_LIMIT_BATCH", None, _integer(0, 10_000)),
    "key_cache_seconds": _Rule("LOYALTY_KEY_CACHE_SECONDS", None, _seconds),
    "failed_key_checks_per_minute": _Rule(
        "LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE", None, _integer(0, 1_000_000)
    ),
    "trusted_proxies": _Rule("LOYALTY_TRUSTED_PROXIES", "--trusted-proxies", _cidrs),
    "log_level": _Rule("LOYALTY_LOG_LEVEL", "--log-level", _choice(LOG_LEVELS, upper=True)),
    "log_format": _Rule("LOYALTY_LOG_FORMAT", "--log-format", _choice(LOG_FORMATS, upper=False)),
    "grpc_target": _Rule("LOYALTY_GRPC_TARGET", "--target", _target),
    "gateway_upstreams": _Rule("LOYALTY_GATEWAY_UPSTREAMS", "--upstream", _targets),
    "envoy_heap_mb": _Rule(
        "LOYALTY_ENVOY_HEAP_MB",
        "--envoy-heap-mb",
        _integer(ENVOY_HEAP_MIN_MB, ENVOY_HEAP_MAX_MB, "a number of MiB"),
    ),
    "gateway_threads": _Rule(
        "LOYALTY_GATEWAY_THREADS",
        "--gateway-threads",
        _integer(1, MAX_GATEWAY_THREADS, "a number of threads"),
    ),
    "envoy_metrics_port": _Rule("LOYALTY_ENVOY_METRICS_PORT", "--envoy-metrics-port", _port),
    "envoy_metrics_host": _Rule("LOYALTY_ENVOY_METRICS_HOST", "--envoy-metrics-host", _host),
}

# Variables of earlier versions that would now be ignored: set, they stop the command
# with what to do instead (an operator's environment file outlives an upgrade).
_RETIRED: dict[str, str] = {
    "LOYALTY_ENVOY_ADMIN_PORT": (
        "LOYALTY_ENVOY_ADMIN_PORT is retired: Envoy's admin interface is a Unix socket of "
        "the work dir now (WORK_DIR/admin/envoy.sock, the gateway's user only); for "
        "Prometheus set LOYALTY_ENVOY_METRICS_PORT instead"
    ),
}


@dataclass(frozen=True)
class Settings:
    """The whole configuration of one `loyalty` command (defaults: VARIABLES)."""

    # With the password of LOYALTY_DATABASE_PASSWORD_FILE when set (`from_env`).
    database_url: str | None = field(default=None, repr=False)
    database_password_file: Path | None = None
    admin_token: str | None = field(default=None, repr=False)
    admin_token_file: Path | None = None
    data_dir: Path = Path(".loyalty")
    # The backup folder (None: no WAL archiving by `up`; `backup` asks for --dir).
    backup_dir: Path | None = None
    # None: loopback only (127.0.0.1), for `up` and `serve` alike.
    grpc_host: str | None = None
    grpc_port: int = DEFAULT_PORT
    http_port: int = 8080
    # None: loopback with plain HTTP, every interface with TLS (`gateway_listen_host`).
    http_host: str | None = None
    # Plain HTTP may listen beyond loopback (keys in clear): only when said by name.
    plain_http_beyond_loopback: bool = False
    # HTTPS at the gateway: both or neither (`tls_files`).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # With TLS: a plain-HTTP port that only redirects (None: no plain HTTP at all), to
    # the public host (required with it).
    http_redirect_port: int | None = None
    public_host: str | None = None
    # With TLS: Strict-Transport-Security on every HTTPS response.
    hsts_max_age: int = DEFAULT_HSTS_MAX_AGE
    hsts_include_subdomains: bool = False
    # Mutual TLS on the gRPC port: all three or none (`grpc_tls`).
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_ca: Path | None = None
    workers: int = field(default_factory=default_workers)
    # The parent's pings that tell a frozen worker (`liveness`).
    worker_check_seconds: float = LivenessSettings.interval
    worker_check_deadline_seconds: float = LivenessSettings.deadline
    worker_check_misses: int = LivenessSettings.misses
    metrics_port: int = 9464
    rate_limit_per_minute: int = rate_limit.DEFAULT_CALLS_PER_MINUTE
    rate_limit_batch: int = 0
    key_cache_seconds: float = key_cache.DEFAULT_TTL_SECONDS
    failed_key_checks_per_minute: int = failed_checks.DEFAULT_LIMIT
    # Envoy: CIDRs whose X-Forwarded-For names the client (none: the TCP peer is).
    trusted_proxies: tuple[str, ...] = ()
    log_level: str = "INFO"
    # None: the command's default (`up`: text for a person; `serve`: json for a collector).
    log_format: str | None = None
    # None: where this host's `serve` listens (server_target).
    grpc_target: str | None = None
    # None: the one server of server_target (`upstreams`).
    gateway_upstreams: tuple[str, ...] | None = None
    # None: follows the machine (`envoy_heap_bytes`).
    envoy_heap_mb: int | None = None
    gateway_threads: int = field(default_factory=default_gateway_threads)
    # Envoy's Prometheus listener (0: none) and its address.
    envoy_metrics_port: int = 0
    envoy_metrics_host: str = "127.0.0.1"
    wallet: WalletSettings = field(default_factory=WalletSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, wallet: bool = True) -> Settings:
        """Read and check every variable (an empty value counts as unset); `wallet`: also
        the wallet ones. Raises ConfigError naming the first wrong variable."""
        env = os.environ if environ is None else environ
        for variable, message in _RETIRED.items():
            if env.get(variable, "").strip():
                raise ConfigError(message)
        values: dict[str, object] = {}
        for name, rule in _RULES.items():
            text = env.get(rule.variable, "")
            if text.strip():
                values[name] = _parse(rule, rule.variable, text)
        password_file = values.get("database_password_file")
        if isinstance(password_file, Path):
            url = values.get("database_url")
            values["database_url"] = with_password_file(
                url if isinstance(url, str) else None, password_file
            )
        if wallet:
            try:
                values["wallet"] = WalletSettings.from_env(env)
            except WalletConfigError as exc:
                raise ConfigError(str(exc)) from None
        return cls(**values)  # type: ignore[arg-type]

    def with_flags(self, **flags: str | None) -> Settings:
        """These settings with command-line values (text, None = not given) replacing the
        environment's, checked like the variables but named by their flag."""
        values: dict[str, object] = {}
        for name, text in flags.items():
            if text is None:
                continue
            rule = _RULES[name]
            values[name] = _parse(rule, rule.flag or rule.variable, text)
        return replace(self, **values)  # type: ignore[arg-type]

    @property
    def server_target(self) -> str:
        """The gRPC server a client command talks to (`admin`, `status`, `gateway run`):
        LOYALTY_GRPC_TARGET / --target, else where `serve` with these settings listens."""
        if self.grpc_target is not None:
            return self.grpc_target
        return join_target(connect_host(self.listen_host), self.grpc_port)

    @property
    def upstreams(self) -> tuple[str, ...]:
        """The servers `gateway run` forwards to: LOYALTY_GATEWAY_UPSTREAMS / --upstream,
        else the one server of `server_target`."""
        if self.gateway_upstreams is not None:
            return self.gateway_upstreams
        return (self.server_target,)

    @property
    def liveness(self) -> LivenessSettings:
        """How the supervising process tells a frozen worker (runtime/process/liveness.py)."""
        return LivenessSettings(
            interval=self.worker_check_seconds,
            deadline=self.worker_check_deadline_seconds,
            misses=self.worker_check_misses,
        )

    @property
    def listen_host(self) -> str:
        """Where the gRPC server listens: LOYALTY_GRPC_HOST / --grpc-host, else loopback
        only (the back office shares the port: exposing it must be a choice)."""
        return self.grpc_host if self.grpc_host is not None else DEFAULT_HOST

    @property
    def envoy_heap_bytes(self) -> int:
        """Envoy's heap budget: LOYALTY_ENVOY_HEAP_MB / --envoy-heap-mb, else
        `default_envoy_heap_bytes()`."""
        if self.envoy_heap_mb is not None:
            return self.envoy_heap_mb * MIB
        return default_envoy_heap_bytes()

    def gateway_listen_host(self, *, tls: bool) -> str:
        """Where the gateway's API listener listens: LOYALTY_HTTP_HOST / --http-host, else
        loopback with plain HTTP (API keys travel in every request: in clear, they stay on
        this machine) and every interface with TLS (a certificate is for clients on the
        network). Raises ConfigError for plain HTTP beyond loopback unless
        LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK allows it."""
        if self.http_host is None:
            return ANY_ADDRESS if tls else LOOPBACK
        if not (tls or self.plain_http_beyond_loopback or is_loopback(self.http_host)):
            raise ConfigError(plain_http_refusal(self.http_host))
        return self.http_host

    def configured_admin_token(self) -> str | None:
        """The back-office token the operator configured: LOYALTY_ADMIN_TOKEN, else the
        content of LOYALTY_ADMIN_TOKEN_FILE (checked like the variable), else None."""
        if self.admin_token is not None:
            return self.admin_token
        if self.admin_token_file is None:
            return None
        name = "LOYALTY_ADMIN_TOKEN_FILE"
        try:
            text = self.admin_token_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"{name}: cannot read {self.admin_token_file}: {reason}") from None
        try:
            return _token(text)
        except ValueError as exc:
            raise ConfigError(
                f"{name}: {self.admin_token_file} must hold one token, {exc}"
            ) from None

    def tls_files(self) -> tuple[Path, Path] | None:
        """(certificate, key) of the gateway's HTTPS, absolute, or None (plain HTTP).
        Raises ConfigError unless both are set, readable, PEM, and the key is the
        certificate's."""
        given = {
            "LOYALTY_TLS_CERT": self.tls_cert,
            "LOYALTY_TLS_KEY": self.tls_key,
        }
        if all(path is None for path in given.values()):
            if self.http_redirect_port is not None:
                raise ConfigError(
                    "LOYALTY_HTTP_REDIRECT_PORT needs HTTPS on the gateway "
                    "(LOYALTY_TLS_CERT and LOYALTY_TLS_KEY)"
                )
            return None
        if self.http_redirect_port == self.http_port:
            raise ConfigError(
                f"LOYALTY_HTTP_REDIRECT_PORT must differ from LOYALTY_HTTP_PORT ({self.http_port})"
            )
        if self.http_redirect_port is not None and self.public_host is None:
            raise ConfigError(
                "LOYALTY_HTTP_REDIRECT_PORT needs LOYALTY_PUBLIC_HOST (--public-host): the "
                "host name of the certificate, where the redirect sends clients (never the "
                "request's Host header, which the client chooses)"
            )
        cert, key = _pem_files(given)
        _check_pair(given, cert, key)
        return cert, key

    def grpc_tls(self) -> GrpcTls | None:
        """The gRPC port's mutual TLS files, absolute, or None (plain gRPC). Raises
        ConfigError unless all three are set, readable, PEM, and the key is the
        certificate's."""
        given = {
            "LOYALTY_GRPC_TLS_CERT": self.grpc_tls_cert,
            "LOYALTY_GRPC_TLS_KEY": self.grpc_tls_key,
            "LOYALTY_GRPC_TLS_CA": self.grpc_tls_ca,
        }
        if all(path is None for path in given.values()):
            return None
        cert, key, ca = _pem_files(given)
        _check_pair(given, cert, key)
        try:
            ssl.create_default_context(cafile=ca)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"LOYALTY_GRPC_TLS_CA: {ca} holds no usable CA certificate: {exc.reason}"
            ) from None
        return GrpcTls(cert=cert, key=key, ca=ca)

    def log_format_for(self, command: str) -> LogFormat:
        """LOYALTY_LOG_FORMAT / --log-format, else JSON for the commands a deployment runs
        (a collector reads them) and text for the ones a person runs."""
        if self.log_format is not None:
            return "json" if self.log_format == "json" else "text"
        return "json" if command in PRODUCTION_COMMANDS else "text"


@dataclass(frozen=True)
class GrpcTls:
    """The gRPC port's mutual TLS (LOYALTY_GRPC_TLS_*): this process's certificate and
    key, and the CA every certificate of the port must chain to (absolute paths)."""

    cert: Path
    key: Path
    ca: Path


def _pem_files(given: dict[str, Path | None]) -> list[Path]:
    """The files named by these variables, absolute; ConfigError unless every one is set
    (all or none), readable and PEM."""
    for name, path in given.items():
        if path is None:
            others = [n for n in given if n != name and given[n] is not None]
            rule = "both or neither" if len(given) == 2 else "all or none"
            verb = "is" if len(others) == 1 else "are"
            raise ConfigError(f"{name} must be set too when {' and '.join(others)} {verb} ({rule})")
    paths = [path.resolve() for path in given.values() if path is not None]
    for name, path in zip(given, paths, strict=True):
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read {path}: {exc.strerror}") from None
        if b"-----BEGIN " not in text:
            raise ConfigError(f"{name}: {path} is not a PEM file")
    return paths


def _check_pair(given: dict[str, Path | None], cert: Path, key: Path) -> None:
    """ConfigError unless `key` is the private key of the certificate `cert`."""
    cert_name, key_name = list(given)[:2]
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{key_name}: {key} is not the private key of the certificate "
            f"{cert_name} {cert} (or one of them is damaged): {exc.reason}"
        ) from None


def with_password_file(url: str | None, path: Path) -> str:
    """LOYALTY_DATABASE_URL (`url`, without a password) with the password that the file
    LOYALTY_DATABASE_PASSWORD_FILE (`path`) holds: its one line, the end of line dropped.
    Raises ConfigError, whose text names the file and never its content."""
    name = "LOYALTY_DATABASE_PASSWORD_FILE"
    if url is None:
        raise ConfigError(
            f"{name} needs LOYALTY_DATABASE_URL: the server, user and database (without "
            "the password)"
        )
    parsed = parse_url(url)
    if parsed.password:  # `user:@host` is none
        raise ConfigError(
            f"LOYALTY_DATABASE_URL holds a password and {name} names another: remove the "
            "password from the URL"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{name}: cannot read {path}: {reason}") from None
    password = text.removesuffix("\n").removesuffix("\r")
    if not password or any(character in password for character in "\r\n\0"):
        raise ConfigError(
            f"{name}: {path} must hold the password on one line (an end of line after it "
            "is dropped)"
        )
    return parsed.set(password=password).render_as_string(hide_password=False)


def _parse(rule: _Rule, name: str, text: str) -> object:
    try:
        return rule.parse(text)
    except ValueError as exc:
        got = "" if rule.secret else f", got {text!r}"
        raise ConfigError(f"{name} must be {exc}{got}") from None


LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - the TLS default, a choice docs/gateway.md explains


def is_loopback(host: str) -> bool:
    """Whether a listener on `host` is reachable from this machine only: a loopback IP
    address (127.0.0.0/8, ::1) or `localhost`. A wildcard (0.0.0.0, ::) or any other name
    is not (a name is not resolved: it could mean anything)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def plain_http_refusal(host: str) -> str:
    """The one line that refuses plain HTTP beyond loopback (settings and rendering)."""
    return (
        f"LOYALTY_HTTP_HOST (--http-host) {host} is beyond loopback and the gateway has no "
        "TLS: API keys would cross the network in clear; set LOYALTY_TLS_CERT and "
        "LOYALTY_TLS_KEY, or LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK=1 "
        "(--plain-http-beyond-loopback) to accept that"
    )


def connect_host(listen_host: str) -> str:
    """The address a client on this machine uses to reach a socket listening on
    `listen_host` (a wildcard address means this machine's loopback, of its family)."""
    if listen_host in ("0.0.0.0", ""):  # noqa: S104
        return "127.0.0.1"
    if listen_host == "::":
        return "::1"
    return listen_host


def program_name(environ: Mapping[str, str] | None = None) -> str:
    """LOYALTY_PROG when it is one printable word, else `loyalty`. Never an error: it only
    words suggestions, and it is read while the help is built, before any checking."""
    text = (os.environ if environ is None else environ).get(PROG_VARIABLE, "").strip()
    return text if re.fullmatch(r"[!-~]+", text) else DEFAULT_PROG


def documented_names() -> set[str]:
    return {v.name for v in VARIABLES}


def checked_names() -> set[str]:
    """Variables read and checked here (the wallet ones are WalletSettings')."""
    return {rule.variable for rule in _RULES.values()} | {PROG_VARIABLE} | set(_RETIRED)


def settings_fields() -> set[str]:
    return {f.name for f in fields(Settings)}


def field_of(variable: str) -> str | None:
    """The `Settings` field a variable sets (None: the wallet's, or none)."""
    return next((name for name, rule in _RULES.items() if rule.variable == variable), None)


def plain_default(name: str) -> object:
    """The default of the `Settings` field `name` when it is one value (MISSING when the
    field computes it, e.g. from the machine)."""
    return next(f.default for f in fields(Settings) if f.name == name)


def _formatted(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def documented_default(variable: Variable) -> str:
    """The default column of a variable: its text, or its field's default formatted."""
    if variable.default is not None:
        return variable.default
    name = field_of(variable.name)
    value = MISSING if name is None else plain_default(name)
    if value in (MISSING, None, ()):
        raise ValueError(f"{variable.name}: no plain Settings default to document")
    aside = f" ({variable.aside})" if variable.aside else ""
    return f"`{_formatted(value)}`{aside}"


def config_table() -> str:
    """docs/configuration.md's table of settings (Markdown)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {documented_default(v)} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)
