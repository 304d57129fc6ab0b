"""`admin codes import`: codes from a file or stdin, sent in chunks of at most
MAX_CODES_PER_CALL, with progress; stopping part-way says what was sent."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import TextIO

import grpc
from google.protobuf.message import Message

from loyalty_grpc.domain.codes import MAX_CODES_PER_CALL, code_batch, split_code_stream
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as pb
from loyalty_grpc.runtime.cli.admin.calls import CommandStoppedError, Metadata, Stub, error_of

READ_CHARS = 64 * 1024
# Without a terminal, one progress line every this many calls (and one at the end).
PROGRESS_EVERY_CALLS = 10


def _text_chunks(source: TextIO) -> Iterator[str]:
    """The file's text in pieces of READ_CHARS, a leading byte-order mark dropped."""
    first = True
    while chunk := source.read(READ_CHARS):
        if first:
            chunk, first = chunk.removeprefix("\ufeff"), False
        yield chunk


class _ImportProgress:
    """Codes read, added and already present, and the rate, on stderr: rewritten in
    place on a terminal, else one line every PROGRESS_EVERY_CALLS calls."""

    def __init__(self) -> None:
        self.leidos = self.recibidos = self.agregados = self.duplicados = self.calls = 0
        self._started = time.monotonic()
        self._tty = sys.stderr.isatty()
        self._open_line = False
        self._ended = False

    def add(self, leidos: int, response: pb.ImportCodesResponse) -> None:
        self.leidos += leidos
        self.recibidos += response.recibidos
        self.agregados += response.agregados
        self.duplicados += response.duplicados
        self.calls += 1
        if self._tty or self.calls % PROGRESS_EVERY_CALLS == 0:
            self.show()

    def line(self) -> str:
        rate = self.leidos / max(time.monotonic() - self._started, 1e-9)
        return (
            f"leídos {self.leidos}  agregados {self.agregados}  "
            f"duplicados {self.duplicados}  ({rate:,.0f} códigos/s)"
        )

    def show(self) -> None:
        if self._tty:
            sys.stderr.write("\r" + self.line() + "\x1b[K")
            self._open_line = True
        else:
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        """Close the in-place line (or print the last line) before anything else; once."""
        if self._ended:
            return
        self._ended = True
        if self._tty and self._open_line:
            sys.stderr.write("\n")
        elif not self._tty and self.calls % PROGRESS_EVERY_CALLS != 0:
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def summary(self) -> str:
        return (
            f"los {self.leidos} códigos leídos antes ya quedaron guardados (agregados "
            f"{self.agregados}, duplicados {self.duplicados}); vuelva a ejecutar el "
            "comando para continuar"
        )

    def stopped(self, codigo: str, detalle: str, first: int) -> CommandStoppedError:
        """The one-line error of a call that failed, saying what was saved before it."""
        return CommandStoppedError(
            codigo,
            (
                f"{detalle} — se detuvo en el bloque {self.calls + 1} (códigos desde el "
                f"{first + 1} del archivo); {self.summary()}"
            ),
        )


def import_codes(stub: Stub, a: argparse.Namespace, t: float, md: Metadata) -> Message:
    """Streams the file: reads it in pieces, splits it like pasted text and deposits
    MAX_CODES_PER_CALL codes per call, never holding the whole file. Each call commits
    on its own and deposits are idempotent, so running the command again resumes."""
    progress = _ImportProgress()
    source: TextIO = sys.stdin if a.file == "-" else Path(a.file).open(encoding="utf-8")  # noqa: SIM115 (closed below)
    pieces = split_code_stream(_text_chunks(source))

    def send(codigos: tuple[str, ...]) -> pb.ImportCodesResponse:
        return stub.ImportCodes(
            pb.ImportCodesRequest(programa=a.programa, promo_id=a.promo, codigos=codigos),
            timeout=t,
            metadata=md,
        )

    try:
        while _import_next_chunk(send, pieces, progress):
            pass
    except KeyboardInterrupt:
        progress.end()
        sys.stderr.write(f"interrumpido: {progress.summary()}\n")
        raise SystemExit(130) from None
    finally:
        progress.end()
        if source is not sys.stdin:
            source.close()
    return pb.ImportCodesResponse(
        recibidos=progress.recibidos, agregados=progress.agregados, duplicados=progress.duplicados
    )


def _import_next_chunk(
    send: Callable[[tuple[str, ...]], pb.ImportCodesResponse],
    pieces: Iterator[str],
    progress: _ImportProgress,
) -> bool:
    """Deposit the next MAX_CODES_PER_CALL codes of the file; False at its end."""
    first = progress.leidos
    try:
        chunk = list(islice(pieces, MAX_CODES_PER_CALL))
    except UnicodeDecodeError as exc:
        raise progress.stopped(
            CodigoError.SOLICITUD_INVALIDA.value, f"el archivo no es UTF-8 ({exc.reason})", first
        ) from None
    if not chunk:
        return False
    try:
        # The server applies the same rules; checking here names a bad code by its place in
        # the file and sends nothing that would fail.
        response = send(code_batch(chunk, "archivo", pasted=True, start=first).codigos)
    except LoyaltyError as exc:
        raise progress.stopped(exc.codigo.value, exc.detalle, first) from None
    except grpc.RpcError as exc:
        raise progress.stopped(*error_of(exc), first) from None
    progress.add(len(chunk), response)
    return True
