"""domain/secret_strength.py: the floor a secret must clear where it is created. It
accepts every secret legitimately in use (the demo keys, the shared benchmark's keys and
token, random keys and tokens as the code and the tests make them) and refuses short,
documented, repeated or tiny-alphabet ones, each with a reason that never repeats it."""

from __future__ import annotations

import json
import random
import re
import secrets
import string
from pathlib import Path

import pytest

from loyalty_grpc.domain import keys, secret_strength
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.secret_strength import MIN_BITS, MIN_LENGTH, Weakness, weakness
from loyalty_grpc.runtime.admin_token import ensure_admin_token
from tests.compose_files import env_file_keys

ROOT = Path(__file__).resolve().parents[2]
DEMO_FIXTURE = ROOT / "src" / "loyalty_grpc" / "runtime" / "cli" / "demo_fixture.json"

# ../shared/bench/tx_vs_pgbench.sh (not ours to change): its keys and admin token.
BENCH_KEYS = [
    "lp_vivo_PerfBenchCajaTodos000000000001",
    *(f"lp_vivo_PerfBenchCajaTodos0000000000{n}" for n in range(10, 74)),
]
BENCH_TOKEN = "perf-admin-token-0123456789abcdef"


def demo_keys() -> list[str]:
    document = json.loads(DEMO_FIXTURE.read_text(encoding="utf-8"))
    return [c["clave"] for p in document["programas"] for c in p["claves"]]


def seeded(alphabet: str, length: int, count: int, seed: int) -> list[str]:
    """Random strings as `secrets` makes them, but reproducible."""
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(count)]


# ---------------------------------------------------------------- accepted


def test_every_key_in_use_is_strong_enough() -> None:
    in_use = [*demo_keys(), *BENCH_KEYS]
    assert len(in_use) == 4 + 65
    for key in in_use:
        assert keys.require_strong(key) is Modo.VIVO or key.startswith("lp_prueba_"), key


def test_the_benchmark_and_test_tokens_are_strong_enough() -> None:
    for token in (
        BENCH_TOKEN,
        "integration-admin-token-0123456789",
        "reliability-admin-token-0123456789",
        "upgrade-admin-token-0123456789",
    ):
        assert weakness(token) is None, token


def test_random_secrets_pass_with_a_margin() -> None:
    """The tests' keys (`lp_vivo_` + 32 hex digits), generated keys (32 of 62 letters and
    digits) and tokens (token_urlsafe): 5,000 of each, reproducible; the weakest of each
    kind is still well above the floor."""
    hex_digits = seeded(string.hexdigits[:16], 32, 5000, seed=1)
    alnum = seeded(string.ascii_letters + string.digits, 32, 5000, seed=2)
    urlsafe = seeded(string.ascii_letters + string.digits + "-_", 43, 5000, seed=3)
    for samples in (hex_digits, alnum, urlsafe):
        assert min(secret_strength.entropy_bits(s) for s in samples) > MIN_BITS + 10


@pytest.mark.parametrize("modo", list(Modo))
def test_generated_keys_and_tokens_pass(modo: Modo, tmp_path: Path) -> None:
    for _ in range(50):
        assert keys.require_strong(keys.new_key(modo)) is modo
    assert weakness(ensure_admin_token(tmp_path)) is None
    assert keys.require_strong("lp_vivo_" + secrets.token_hex(16)) is Modo.VIVO


# ---------------------------------------------------------------- refused


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ("a", Weakness.TOO_SHORT),
        ("x" * (MIN_LENGTH - 1), Weakness.TOO_SHORT),
        ("Q7hk2PzTt9wXcV4bN8mL1sR", Weakness.TOO_SHORT),  # random, but 23 characters
        ("change-me-to-a-long-random-token", Weakness.PLACEHOLDER),
        ("CHANGE-ME-TO-A-LONG-RANDOM-TOKEN", Weakness.PLACEHOLDER),
        ("0" * 24, Weakness.PREDICTABLE),
        ("t" * 32, Weakness.PREDICTABLE),
        ("Z9" * 20, Weakness.PREDICTABLE),
        ("OtroPrograma" + "0" * 17, Weakness.PREDICTABLE),
        ("abcdef" * 4, Weakness.PREDICTABLE),  # 6 different characters: 62 bits
    ],
)
def test_weak_secrets_are_refused_with_their_reason(secret: str, expected: Weakness) -> None:
    verdict = weakness(secret)
    assert verdict is not None
    assert verdict.weakness is expected
    for line in (secret_strength.reason(verdict), secret_strength.motivo(verdict)):
        assert "\n" not in line
        assert len(secret) < 4 or secret not in line


def test_the_estimate_does_not_see_order() -> None:
    """A floor, not a proof (the module says so): 24 characters evenly over 8 different
    ones are exactly MIN_BITS whatever their order."""
    assert secret_strength.entropy_bits("abcdefgh" * 3) == pytest.approx(MIN_BITS)
    assert weakness("abcdefgh" * 3) is None
    assert weakness("abcdefgh" * 2 + "abcdefga") is not None


def test_the_documented_examples_are_refused_by_name() -> None:
    """The example files' values themselves: loyalty.env.example's admin token and the
    tour's key that does not exist (docs/tour.md)."""
    token = env_file_keys(ROOT / "loyalty.env.example")["LOYALTY_ADMIN_TOKEN"]
    assert (verdict := weakness(token)) is not None
    assert verdict.weakness is Weakness.PLACEHOLDER
    tour = (ROOT / "docs" / "tour.md").read_text(encoding="utf-8")
    (missing,) = set(re.findall(r"Bearer (lp_vivo_NoExiste\w+)", tour))
    with pytest.raises(LoyaltyError) as error:
        keys.require_strong(missing)
    assert error.value.codigo is CodigoError.CLAVE_MAL_FORMADA
    assert "ejemplo publicado" in error.value.detalle


@pytest.mark.parametrize(
    "key",
    [
        "lp_vivo_000000000000000000000000",
        "lp_vivo_OtroPrograma00000000000000000",
        "lp_prueba_" + "B1" * 12,
        "lp_vivo_" + "W" * 24,
    ],
)
def test_weak_keys_are_malformed_for_creation_and_never_echoed(key: str) -> None:
    with pytest.raises(LoyaltyError) as error:
        keys.require_strong(key)
    assert error.value.codigo is CodigoError.CLAVE_MAL_FORMADA
    detalle = error.value.detalle
    assert key not in detalle
    assert key.split("_", 2)[2] not in detalle
    assert f"se piden {MIN_BITS}" in detalle
    # Still a key as far as a lookup is concerned: a stored one keeps working.
    assert keys.mode_of(key) is not None


def test_the_docs_state_the_rule_s_own_figures() -> None:
    """The figures written in prose are the module's."""
    fixtures = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    security = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert f"carry under {MIN_BITS} bits" in fixtures
    assert f"at least {MIN_LENGTH} characters" in security
    assert f"at least {MIN_BITS} bits" in security
