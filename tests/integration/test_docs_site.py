"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict`, so
every link, anchor and nav entry is true; it ships the OpenAPI document the gateway serves
and Swagger UI's files, so the interactive reference needs no network; and, where Debian's
chromium is installed, every page loads in it and both API references show every
operation (scripts/check_site.py, about 45 s for the whole site on 2 busy cores)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-d", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    return built


def test_the_site_builds_strictly_with_every_page_in_its_nav(site: Path) -> None:
    # Strict mode turns a page left out of the nav into a failure (mkdocs.yml validation).
    for page in (ROOT / "docs").glob("*.md"):
        name = "" if page.stem == "index" else f"{page.stem}/"
        assert (site / name / "index.html").is_file(), page.name


def test_the_site_serves_the_gateway_s_openapi_document(site: Path) -> None:
    served = (site / "openapi.json").read_bytes()
    assert served == (ROOT / "gateway" / "openapi.json").read_bytes()


def test_swagger_ui_comes_from_the_site_itself(site: Path) -> None:
    frames = list((site / "openapi").glob("swagger-*.html"))
    assert len(frames) == 1
    frame = frames[0].read_text(encoding="utf-8")
    assert "http://" not in frame
    assert "https://" not in frame
    for asset in ["javascripts/swagger-ui-bundle.js", "stylesheets/swagger-ui.css"]:
        assert (site / "assets" / asset).stat().st_size > 10_000, asset


NO_CHROMIUM = "no chromium: apt-get install chromium"


@pytest.mark.skipif(shutil.which("chromium") is None, reason=NO_CHROMIUM)
def test_every_page_loads_in_a_real_browser(site: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_site.py"), "--site", str(site)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
