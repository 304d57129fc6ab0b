"""Running a parsed `loyalty admin` command: the token, the channel, the call, and its
outcome printed (one `error: <codigo>: <detalle>` line on failure, exit 1)."""

from __future__ import annotations

import argparse
import json
import sys

import grpc
from google.protobuf import json_format

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.admin_token import admin_token_path, read_admin_token
from loyalty_grpc.runtime.cli.admin.calls import Call, CommandStoppedError, error_of
from loyalty_grpc.runtime.cli.admin.output import render
from loyalty_grpc.runtime.grpc_channel import open_channel
from loyalty_grpc.runtime.settings import Settings


def run_admin(args: argparse.Namespace, settings: Settings) -> int:
    """Run the parsed `admin` command; 0 on success, 1 on an error (printed as one line)."""
    settings = settings.with_flags(data_dir=args.data_dir)  # checked like LOYALTY_DATA_DIR
    token = settings.configured_admin_token() or read_admin_token(settings.data_dir)
    if not token:
        return _fail(
            CodigoError.NO_AUTENTICADO.value,
            "falta el token de administración: LOYALTY_ADMIN_TOKEN, LOYALTY_ADMIN_TOKEN_FILE o "
            f"{admin_token_path(settings.data_dir)}",
        )
    call: Call = args.admin_call
    metadata = (("authorization", f"Bearer {token}"),)
    try:
        with open_channel(args.target or settings.server_target, settings.grpc_tls()) as channel:
            response = call(pb_grpc.BackofficeServiceStub(channel), args, args.timeout, metadata)
    except grpc.RpcError as exc:
        return _fail(*error_of(exc))
    except CommandStoppedError as exc:
        return _fail(exc.codigo, exc.detalle)
    except OSError as exc:  # reading the fixture file
        return _fail(CodigoError.SOLICITUD_INVALIDA.value, str(exc))
    if args.json:
        sys.stdout.write(
            json.dumps(
                json_format.MessageToDict(
                    response,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                ),
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
    else:
        sys.stdout.write("".join(line + "\n" for line in render(response)))
    return 0


def _fail(codigo: str, detalle: str) -> int:
    """One line on stderr, the same shape for every failure; exit status 1."""
    sys.stderr.write(f"error: {codigo}: {' '.join(detalle.split())}\n")
    return 1
