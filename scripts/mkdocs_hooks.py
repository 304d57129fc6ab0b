"""MkDocs hooks of the documentation site (mkdocs.yml `hooks`): the OpenAPI document that
the gateway serves, gateway/openapi.json, joins the built site as /openapi.json, so the
interactive reference (docs/openapi.md, Swagger UI from the mkdocs-swagger-ui-tag wheel)
loads it from the site itself: one file, no copy in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

OPENAPI = Path(__file__).resolve().parents[1] / "gateway" / "openapi.json"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "openapi.json", abs_src_path=str(OPENAPI)))
    return files
