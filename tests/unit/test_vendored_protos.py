"""proto/third_party/googleapis holds verbatim copies of googleapis-common-protos files (buf
resolves google/api offline; native callers decode google.rpc status details with the
repository's protos alone): each equals the installed package's file of the same path, its
licence header included, and the google/rpc files a caller needs are all there."""

from __future__ import annotations

from pathlib import Path

import google.api.annotations_pb2

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "proto" / "third_party" / "googleapis"
INSTALLED = Path(google.api.annotations_pb2.__file__).parents[2]  # the folder holding google/


def test_vendored_protos_are_the_installed_packages():
    copies = sorted(p.relative_to(VENDORED) for p in VENDORED.rglob("*.proto"))
    assert {str(p) for p in copies} >= {
        "google/api/annotations.proto",
        "google/api/http.proto",
        "google/rpc/status.proto",
        "google/rpc/error_details.proto",
        "google/rpc/code.proto",
    }
    for relative in copies:
        text = (VENDORED / relative).read_text(encoding="utf-8")
        assert text == (INSTALLED / relative).read_text(encoding="utf-8"), relative
        assert "Licensed under the Apache License, Version 2.0" in text, relative
