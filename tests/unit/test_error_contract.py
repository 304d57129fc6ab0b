"""The error catalogue (domain/errors.py) pinned against the documents it implements, by a
table copied BY HAND from them: never derive these tables from the code, or a status
changed in the catalogue (and the generated docs regenerated) would pass unnoticed.

- DESIGN: ../shared/DESIGN.md §2 "Errors: HTTP status and `error.codigo`" (the decided
  HTTP status and gRPC code of every codigo of the HTTP API);
- CONTRACT: ../shared/spec/pos-api-v1.md "Errors", the statuses the contract shows
  (HTTP only; `fan_no_encontrado` is "not shown" there, so it is not in this table);
- BEYOND_THE_DOCUMENTS: catalogue codes that neither document lists (a gateway/server
  version skew code and the back office's own), pinned here by hand from the catalogue as
  reviewed; they belong in DESIGN.md, and are kept apart so that nobody mistakes them for
  design decisions.

A change to any of these statuses must change the design first, then this file.
"""

from __future__ import annotations

import grpc

from loyalty_grpc.domain.errors import CATALOGO

# codigo -> (HTTP status, gRPC code): DESIGN.md §2, row by row (the row
# "409 | FAILED_PRECONDITION | `codigo_liberado`, `codigo_no_asignado`" is two entries).
DESIGN: dict[str, tuple[int, str]] = {
    "solicitud_invalida": (400, "INVALID_ARGUMENT"),
    "campo_requerido": (400, "INVALID_ARGUMENT"),
    "importe_invalido": (400, "INVALID_ARGUMENT"),
    "ts_invalido": (400, "INVALID_ARGUMENT"),
    "demasiados_codigos": (400, "INVALID_ARGUMENT"),
    "codigo_invalido": (400, "INVALID_ARGUMENT"),
    "cursor_invalido": (400, "INVALID_ARGUMENT"),
    "moneda_no_soportada": (400, "INVALID_ARGUMENT"),
    "no_autenticado": (401, "UNAUTHENTICATED"),
    "clave_invalida": (401, "UNAUTHENTICATED"),
    "permiso_denegado": (403, "PERMISSION_DENIED"),
    "fan_no_encontrado": (404, "NOT_FOUND"),
    "codigo_no_encontrado": (404, "NOT_FOUND"),
    "promo_no_encontrada": (404, "NOT_FOUND"),
    "ruta_no_encontrada": (404, "NOT_FOUND"),
    "metodo_no_permitido": (405, "UNIMPLEMENTED"),
    "codigo_liberado": (409, "FAILED_PRECONDITION"),
    "codigo_no_asignado": (409, "FAILED_PRECONDITION"),
    "promo_no_admite_codigos": (409, "FAILED_PRECONDITION"),
    "solicitud_muy_grande": (413, "INVALID_ARGUMENT"),
    "id_externo_en_conflicto": (422, "FAILED_PRECONDITION"),
    "demasiadas_llamadas": (429, "RESOURCE_EXHAUSTED"),
    "error_interno": (500, "INTERNAL"),
    "servicio_no_disponible": (503, "UNAVAILABLE"),
}

# codigo -> HTTP status: pos-api-v1.md "Errors", "Known codes" (the statuses it shows).
CONTRACT: dict[str, int] = {
    "codigo_liberado": 409,
    "codigo_no_asignado": 409,
    "demasiadas_llamadas": 429,
}

# codigo -> (HTTP status, gRPC code, back office only): in the catalogue, in neither
# document (see the module doc).
BEYOND_THE_DOCUMENTS: dict[str, tuple[int, str, bool]] = {
    "no_implementado": (501, "UNIMPLEMENTED", False),
    # Envoy's answer to a request that does not arrive whole in time (issue 22 §3).
    "tiempo_agotado": (408, "DEADLINE_EXCEEDED", False),
    "fixture_invalido": (400, "INVALID_ARGUMENT", True),
    "permiso_desconocido": (400, "INVALID_ARGUMENT", True),
    "clave_mal_formada": (400, "INVALID_ARGUMENT", True),
    "programa_no_encontrado": (404, "NOT_FOUND", True),
    "clave_no_encontrada": (404, "NOT_FOUND", True),
    "venta_no_encontrada": (404, "NOT_FOUND", True),
    "fan_duplicado": (409, "ALREADY_EXISTS", True),
    "correo_duplicado": (409, "ALREADY_EXISTS", True),
    "qr_duplicado": (409, "ALREADY_EXISTS", True),
    "promo_duplicada": (409, "ALREADY_EXISTS", True),
    "transicion_invalida": (409, "FAILED_PRECONDITION", True),
    # As id_externo_en_conflicto (DESIGN.md §2), for the back office's request ids (issue 26).
    "request_id_en_conflicto": (422, "FAILED_PRECONDITION", True),
}


def catalogue() -> dict[str, tuple[int, str]]:
    return {codigo.value: (entrada.http, entrada.grpc) for codigo, entrada in CATALOGO.items()}


def test_the_tables_are_consistent_among_themselves() -> None:
    assert not set(DESIGN) & set(BEYOND_THE_DOCUMENTS)
    for codigo, http in CONTRACT.items():
        assert DESIGN[codigo][0] == http, f"DESIGN.md and the contract disagree on {codigo}"
    for http, code in [*DESIGN.values(), *((h, c) for h, c, _ in BEYOND_THE_DOCUMENTS.values())]:
        assert 400 <= http <= 599
        assert hasattr(grpc.StatusCode, code)


def test_every_design_entry_is_in_the_catalogue_with_its_statuses() -> None:
    found = catalogue()
    missing = sorted(set(DESIGN) - set(found))
    assert missing == [], f"codes DESIGN.md decides that the catalogue lacks: {missing}"
    differing = {
        codigo: {"DESIGN.md": decided, "catalogue": found[codigo]}
        for codigo, decided in DESIGN.items()
        if found[codigo] != decided
    }
    assert differing == {}


def test_every_contract_status_is_the_catalogues() -> None:
    found = catalogue()
    assert {codigo: found[codigo][0] for codigo in CONTRACT} == CONTRACT


def test_every_catalogue_entry_is_pinned_here() -> None:
    """The other direction: a code added to the catalogue must be decided in the design
    (and copied into DESIGN above), or at least pinned in BEYOND_THE_DOCUMENTS."""
    found = catalogue()
    unpinned = sorted(set(found) - set(DESIGN) - set(BEYOND_THE_DOCUMENTS))
    assert unpinned == [], f"catalogue codes in no table of this file: {unpinned}"


def test_codes_beyond_the_documents_keep_their_statuses() -> None:
    found = {codigo.value: entrada for codigo, entrada in CATALOGO.items()}
    for codigo, (http, code, interno) in BEYOND_THE_DOCUMENTS.items():
        assert codigo in found, codigo
        entrada = found[codigo]
        assert (entrada.http, entrada.grpc, entrada.interno) == (http, code, interno), codigo


def test_the_design_table_is_the_http_api() -> None:
    """DESIGN.md's table is the HTTP API: none of its codes is back office only."""
    back_office_only = sorted(
        codigo.value for codigo, entrada in CATALOGO.items() if entrada.interno
    )
    assert not set(DESIGN) & set(back_office_only)
