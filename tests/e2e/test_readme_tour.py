"""The README's tour (between `<!-- tour:start -->` and `<!-- tour:end -->`), run as a
newcomer pastes it: line by line in a shell, against `loyalty up --demo` on a fresh data
directory. Every answer the README shows under a command must be the answer the service
gives, except the values that differ on every run (VOLATILE), which must keep their kind.

How the README writes the tour, in ```sh blocks:
- a command line is run by bash with everything set by the lines before it (variables,
  the `api` function); the address http://127.0.0.1:8080 is replaced by the test stack's;
- the `# …` lines right under a command are its answer: `BODY (HTTP STATUS)`, wrapped
  after any comma outside a string (continuation lines are indented);
- `NAME=VALUE   # the "siguiente" above` stands for copying the previous answer's
  `data.siguiente`: the test sets NAME to the real one.
On a mismatch the failure shows the real answers in the README's form, to paste."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.processes import READY_LINE, Running, demo_up_args, loyalty_env
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_ADDRESS = "http://127.0.0.1:8080"
TOUR = re.compile(r"<!-- tour:start -->\n(.*?)<!-- tour:end -->", re.S)
BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)
COPY = re.compile(r'^(\w+)=(\S+)\s+# the "siguiente" above$')
ANSWER = re.compile(r"^(.*) \(HTTP (\d{3})\)$", re.S)
WIDTH = 96
# Keys whose values differ on every run: the moment of the call or of the demo's load,
# and cursors (they carry transaction ids).
VOLATILE = {"hora", "actualizado", "en", "siguiente", "desde"}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)  # the `# …` lines under it

    @property
    def answer(self) -> str | None:
        if not self.shown:
            return None
        return "".join(line.removeprefix("#").strip() for line in self.shown)


def tour_steps(readme: str) -> list[Step]:
    section = TOUR.search(readme)
    assert section, "README.md has no <!-- tour:start --> … <!-- tour:end --> section"
    steps: list[Step] = []
    for block in BLOCK.findall(section.group(1)):
        for line in block.splitlines():
            if line.startswith("#"):
                assert steps, f"an answer with no command above it: {line}"
                steps[-1].shown.append(line)
            elif line.strip():
                steps.append(Step(line))
    return steps


def wrapped(answer: str) -> list[str]:
    """`answer` as the README shows it: `# ` lines of at most WIDTH characters, broken
    after a comma outside a string, continuation lines indented."""
    lines: list[str] = []
    current, in_string, escaped = "", False, False
    for char in answer:
        current += char
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "," and len(current) > WIDTH - 30:
            lines.append(current)
            current = ""
    lines.append(current)
    return [("# " if n == 0 else "#  ") + line for n, line in enumerate(lines)]


def readable(body: str, status: str) -> str:
    """An answer as the README shows it before wrapping: letters unescaped."""
    compact = json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    return f"{compact} (HTTP {status})"


def same_answer(shown: Any, real: Any, where: str = "") -> list[str]:
    """Where the answer shown and the real one differ (values of VOLATILE keys only need
    the same kind: both empty or not, both timestamps or not)."""
    if isinstance(shown, dict) and isinstance(real, dict):
        if shown.keys() != real.keys():
            return [f"{where or '.'}: keys {sorted(shown)} shown, {sorted(real)} real"]
        return [
            problem
            for key in shown
            for problem in (
                _same_kind(shown[key], real[key], f"{where}.{key}")
                if key in VOLATILE
                else same_answer(shown[key], real[key], f"{where}.{key}")
            )
        ]
    if isinstance(shown, list) and isinstance(real, list) and len(shown) == len(real):
        return [
            p
            for n, (s, r) in enumerate(zip(shown, real, strict=True))
            for p in same_answer(s, r, f"{where}[{n}]")
        ]
    return (
        []
        if shown == real and type(shown) is type(real)
        else [f"{where}: {shown!r} shown, {real!r} real"]
    )


def _same_kind(shown: Any, real: Any, where: str) -> list[str]:
    def kind(value: Any) -> tuple[type, bool, bool]:
        text = isinstance(value, str)
        return type(value), bool(value), text and bool(TIMESTAMP.match(value))

    return [] if kind(shown) == kind(real) else [f"{where}: {shown!r} shown, {real!r} real"]


@dataclass
class Shell:
    """Runs the tour's lines as a person pasting them into one shell would."""

    address: str
    lines: list[str] = field(default_factory=list)  # what was set so far
    last: str = ""

    def run(self, step: Step) -> str:
        command = step.command.replace(README_ADDRESS, self.address)
        copied = COPY.match(command)
        if copied:
            siguiente = json.loads(self._body(self.last))["data"]["siguiente"]
            self.lines.append(f"{copied.group(1)}={shlex.quote(siguiente)}")
            return ""
        if step.answer is None:
            self.lines.append(command)
            return ""
        done = subprocess.run(
            ["bash", "-c", "\n".join([*self.lines, command])],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (command, done.stderr)
        assert not done.stderr, (command, done.stderr)
        self.last = done.stdout.rstrip("\n")
        return self.last

    @staticmethod
    def _body(answer: str) -> str:
        matched = ANSWER.match(answer)
        assert matched, f"not `BODY (HTTP STATUS)`: {answer!r}"
        return matched.group(1)


@pytest.fixture(scope="module")
def demo_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("tour")
    http_port = free_port()
    up = Running(
        demo_up_args(data_dir, http_port),
        ROOT,
        loyalty_env(),
    )
    try:
        up.wait_for(READY_LINE)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        assert up.stop() == 0, "\n".join(up.lines)


def test_the_tour_covers_every_endpoint() -> None:
    commands = " ".join(step.command for step in tour_steps(README.read_text()))
    for path in ["ping", "fan/resolve", "tx", "redeem", "promos", "codes", "roster"]:
        assert f"$API/{path}" in commands, path


def test_every_answer_the_readme_shows_is_the_services(demo_address: str) -> None:
    shell = Shell(demo_address)
    mismatches: list[str] = []
    for step in tour_steps(README.read_text()):
        real = shell.run(step)
        if step.answer is None:
            continue
        shown_answer, real_answer = ANSWER.match(step.answer), ANSWER.match(real)
        assert shown_answer, f"the README's answer is not `BODY (HTTP STATUS)`: {step.shown}"
        assert real_answer, f"{step.command}\nanswered {real!r}"
        problems = [] if shown_answer.group(2) == real_answer.group(2) else ["HTTP status"]
        problems += same_answer(json.loads(shown_answer.group(1)), json.loads(real_answer.group(1)))
        if problems:
            real_lines = wrapped(readable(real_answer.group(1), real_answer.group(2)))
            mismatches.append("\n".join([step.command, *problems, "the real answer:", *real_lines]))
    assert not mismatches, "\n\n".join(mismatches)
