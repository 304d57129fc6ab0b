"""The tours (between `<!-- tour:start -->` and `<!-- tour:end -->`): the README's short
one and the full one of docs/tour.md, each run as a newcomer pastes it: line by line in
one bash shell, against its own `loyalty up --demo` on a fresh data directory. Every
answer a tour shows under a command must be the answer the service gives, except the
values that differ on every run (VOLATILE), which must keep their kind.

How a tour is written, in ```sh blocks:
- every line is pasted into the same shell (variables and functions persist; a later line
  reads what an earlier one set, e.g. `SIGUIENTE=$(jq -r .data.siguiente "$LAST")` takes
  the cursor from the previous answer); the address http://127.0.0.1:8080 is replaced by
  the test stack's;
- the `# …` lines right under a command are its answer: `BODY (HTTP STATUS)`, wrapped
  after any comma outside a string (continuation lines are indented); a line without them
  must print nothing.
The tours use jq. Where it is not installed (the tour says `apt-get install jq`), the shell
gets a `jq` function that reads `jq -r .a.b FILE` with Python, the one form the tours use,
and refuses any other.
On a mismatch the failure shows the real answers in the tour's form, to paste."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.e2e.processes import READY_LINE, Running, demo_up_args, loyalty_env
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FULL_TOUR = ROOT / "docs" / "tour.md"
TOURS = {"README.md": README, "docs/tour.md": FULL_TOUR}
README_ADDRESS = "http://127.0.0.1:8080"
TOUR = re.compile(r"<!-- tour:start -->\n(.*?)<!-- tour:end -->", re.S)
BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)
ANSWER = re.compile(r"^(.*) \(HTTP (\d{3})\)$", re.S)
WIDTH = 96
# Keys whose values differ on every run: the moment of the call or of the demo's load,
# cursors (they carry transaction ids), and a sale's folio (each worker process takes its
# own block of folios: which worker a call reaches decides a new sale's `tx`).
VOLATILE = {"hora", "actualizado", "en", "siguiente", "desde", "tx"}
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
    assert section, "no <!-- tour:start --> … <!-- tour:end --> section"
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


# `jq -r .a.b FILE` where jq is missing: the one form the tours use, read with Python.
JQ_FALLBACK = r"""jq() {
  if [ "$#" -ne 3 ] || [ "$1" != -r ]; then
    echo "jq fallback: only jq -r .a.b FILE" >&2; return 2
  fi
  PYTHON -c 'import json, sys
value = json.load(open(sys.argv[2]))
for key in sys.argv[1].split(".")[1:]:
    value = value[key]
print(value)' "$2" "$3"
}"""


class Shell:
    """One bash process, fed the tour's lines as a person pasting them would: each
    command's output and errors go to files, and a marker line on stdout says it ended."""

    def __init__(self, address: str, workdir: Path) -> None:
        self.address = address
        self.workdir = workdir
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=workdir,
            env={**os.environ, "TMPDIR": str(workdir)},  # the tour's mktemp lands here
        )
        assert self.process.stdin
        assert self.process.stdout
        self.stdin: IO[str] = self.process.stdin
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: IO[str] = self.process.stdout
        threading.Thread(target=self._read, daemon=True).start()
        self.count = 0
        if shutil.which("jq") is None:
            self._send(JQ_FALLBACK.replace("PYTHON", shlex.quote(sys.executable)))

    def _read(self) -> None:
        for line in self.stdout:
            self.lines.put(line)

    def run(self, step: Step) -> str:
        """What the command printed (stdout), asserting it wrote nothing on stderr and
        exited 0."""
        command = step.command.replace(README_ADDRESS, self.address)
        out, err, status = self._send(command)
        assert status == 0, (command, err)
        assert not err, (command, err)
        return out.rstrip("\n")

    def _send(self, command: str) -> tuple[str, str, int]:
        self.count += 1
        out, err = self.workdir / f"{self.count}.out", self.workdir / f"{self.count}.err"
        marker = f"__tour_step_{self.count}_done__"
        self.stdin.write(f"{{\n{command}\n}} >{out} 2>{err}; echo {marker} $?\n")
        self.stdin.flush()
        while True:
            line = self.lines.get(timeout=60)
            if line.startswith(marker):
                status = int(line.split()[1])
                break
        return out.read_text(), err.read_text(), status

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=10)
        self.stdout.close()


@pytest.fixture
def demo_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh `loyalty up --demo` for each tour: each starts from the demo's data."""
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


@pytest.mark.parametrize(
    ("tour", "paths"),
    [
        ("README.md", ["ping", "fan/resolve", "tx", "redeem"]),
        ("docs/tour.md", ["ping", "fan/resolve", "tx", "redeem", "promos", "codes", "roster"]),
    ],
)
def test_the_tour_covers_its_endpoints(tour: str, paths: list[str]) -> None:
    commands = " ".join(step.command for step in tour_steps(TOURS[tour].read_text()))
    for path in paths:
        assert f"$API/{path}" in commands, path


def test_no_tour_pastes_a_cursor() -> None:
    """A cursor comes from the previous answer (jq), never a literal from another run."""
    for tour in TOURS.values():
        for step in tour_steps(tour.read_text()):
            assert not re.search(r"\bSIGUIENTE=[A-Za-z0-9_-]", step.command), step.command


@pytest.mark.parametrize("tour", list(TOURS))
def test_every_answer_the_tour_shows_is_the_services(
    tour: str, demo_address: str, tmp_path: Path
) -> None:
    shell = Shell(demo_address, tmp_path)
    mismatches: list[str] = []
    try:
        for step in tour_steps(TOURS[tour].read_text()):
            real = shell.run(step)
            if step.answer is None:
                assert not real, f"{step.command}\nprinted {real!r} but the tour shows nothing"
                continue
            shown_answer, real_answer = ANSWER.match(step.answer), ANSWER.match(real)
            assert shown_answer, f"the tour's answer is not `BODY (HTTP STATUS)`: {step.shown}"
            assert real_answer, f"{step.command}\nanswered {real!r}"
            problems = [] if shown_answer.group(2) == real_answer.group(2) else ["HTTP status"]
            problems += same_answer(
                json.loads(shown_answer.group(1)), json.loads(real_answer.group(1))
            )
            if problems:
                real_lines = wrapped(readable(real_answer.group(1), real_answer.group(2)))
                mismatches.append(
                    "\n".join([step.command, *problems, "the real answer:", *real_lines])
                )
    finally:
        shell.close()
    assert not mismatches, "\n\n".join(mismatches)
