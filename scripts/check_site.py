"""Check the built documentation site in a real headless browser (Debian's chromium): serve
it on loopback, load every page and assert that it renders (its title and article, every
file it asks for served, nothing asked of another host), and that the API reference shows
every operation of the OpenAPI document: the generated page (docs/api.md) and the
interactive one (Swagger UI, which must load the document from the site itself).

    python scripts/check_site.py                 # build the site into a temporary folder
    python scripts/check_site.py --site site/    # check a site already built (./dev docs)

Exit code 0 when every check passes, 1 with one line per failure otherwise, 2 when
chromium is missing. tests/integration/test_docs_site.py runs it where chromium is
installed (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# As the machine notes say chromium needs here (root, no sandbox, a closed network); every
# host but loopback is unresolvable, so a page that asks another host for anything fails.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
PAGE_BUDGET_MS = 3000
SWAGGER_BUDGET_MS = 20000
# Attributes through which a page loads something by itself (links to read are `<a href>`).
LOADS = re.compile(
    r"<(?:script|img|iframe|link|source|video|audio)\b[^>]*?\b(?:src|href)=\"([^\"]+)\""
)


@dataclass
class Served:
    """Every request the site's server answered: (path, status), in order."""

    requests: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def since(self, start: int) -> list[tuple[str, int]]:
        with self.lock:
            return self.requests[start:]

    def count(self) -> int:
        with self.lock:
            return len(self.requests)


def serve(site: Path, served: Served) -> ThreadingHTTPServer:
    class Handler(SimpleHTTPRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            with served.lock:
                served.requests.append((self.path, int(code) if str(code).isdigit() else 0))

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: what was asked is recorded by log_request."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def dump_dom(chromium: str, url: str, budget_ms: int) -> str:
    """The page's DOM after `budget_ms` of virtual time (scripts run, fetches answered)."""
    with tempfile.TemporaryDirectory(prefix="check-site-profile-") as profile:
        done = subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode} on {url}: {done.stderr[-500:]}")
    return done.stdout


def pages(site: Path) -> list[str]:
    """Every page of the site, as its URL path (`/`, `/tour/`…)."""
    found = []
    for index in sorted(site.rglob("index.html")):
        relative = index.parent.relative_to(site).as_posix()
        if relative.startswith(("assets", "search")):
            continue
        found.append("/" if relative == "." else f"/{relative}/")
    return found


def external_loads(site: Path) -> list[str]:
    """Files of the site that make a browser load something from another host."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        for target in LOADS.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^(https?:)?//", target) and not re.match(
                r"^(https?:)?//(127\.0\.0\.1|localhost)[:/]", target
            ):
                problems.append(f"{page.relative_to(site)} loads {target}")
    return problems


def operations(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(METHOD, path, operationId) of every operation of the OpenAPI document."""
    return [
        (method.upper(), path, op["operationId"])
        for path, methods in document["paths"].items()
        for method, op in methods.items()
    ]


def check(site: Path, chromium: str) -> list[str]:
    failures = external_loads(site)
    served = Served()
    server = serve(site, served)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path in pages(site):
            start = served.count()
            dom = dump_dom(chromium, base + path, PAGE_BUDGET_MS)
            if not re.search(r"<article\b", dom) or not re.search(r"<h1\b", dom):
                failures.append(f"{path}: no article or h1 rendered")
            if 'class="md-header' not in dom or 'class="md-nav' not in dom:
                failures.append(f"{path}: the theme's header or navigation did not render")
            for asked, status in served.since(start):
                if status >= 400 and asked != "/favicon.ico":
                    failures.append(f"{path}: {asked} answered {status}")
        document = json.loads((site / "openapi.json").read_text(encoding="utf-8"))
        failures += check_references(site, chromium, base, served, document)
    finally:
        server.shutdown()
        server.server_close()
    return failures


def check_references(
    site: Path, chromium: str, base: str, served: Served, document: dict[str, Any]
) -> list[str]:
    failures = []
    wanted = operations(document)
    page = html.unescape(dump_dom(chromium, f"{base}/api/", PAGE_BUDGET_MS))
    failures += [
        f"/api/: no section for {method} {path}"
        for method, path, _ in wanted
        if not re.search(rf"<h2\b[^>]*>\s*<code>{re.escape(f'{method} {path}')}</code>", page)
    ]
    frames = re.findall(
        r'<iframe[^>]*\bsrc="([^"]+\.html)"', (site / "openapi" / "index.html").read_text()
    )
    if not frames:
        return [*failures, "/openapi/: no Swagger UI frame"]
    start = served.count()
    swagger = dump_dom(chromium, f"{base}/openapi/{frames[0]}", SWAGGER_BUDGET_MS)
    failures += [
        f"/openapi/: Swagger UI shows no {method} {path} ({operation_id})"
        for method, path, operation_id in wanted
        if not re.search(rf'id="operations-[^"]*-{re.escape(operation_id)}"', swagger)
    ]
    if ("/openapi.json", 200) not in served.since(start):
        failures.append("/openapi/: Swagger UI did not load /openapi.json from the site")
    return failures


def build(into: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [
            str(Path(sys.executable).parent / "mkdocs"),
            "build",
            "--strict",
            "--quiet",
            "-d",
            str(into),
        ],
        cwd=ROOT,
        check=True,
        env=env,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--site", type=Path, help="a built site (default: build one now)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    if shutil.which(args.chromium) is None:
        print(f"no chromium ({args.chromium}): apt-get install chromium")
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="check-site-") as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build(site)
        failures = check(site, args.chromium)
        checked = len(pages(site))
    for failure in failures:
        print(failure)
    outcome = f"{len(failures)} failure(s)" if failures else "every check passed"
    print(f"{checked} pages checked in {time.monotonic() - started:.0f} s: {outcome}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
