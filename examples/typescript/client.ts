// A caller of the JSON API through the gateway (Envoy), typed from the OpenAPI document:
// openapi-typescript turns gateway/openapi.json into api.d.ts, openapi-fetch makes the
// calls with those types. It pings, resolves a fan, registers a sale (twice, as a till
// whose first answer was lost: the same id_externo) and reads `puntos_acreditados`,
// redeems two codes in one call (the batch form's own type), then shows a failure's
// envelope, its `codigo` typed by the document (docs/clients.md).
//
//   npm ci && npm run generate && npm run build
//   LOYALTY_URL=http://127.0.0.1:8080 LOYALTY_KEY=lp_vivo_DemoCajaPrincipalTodos0000001 npm start
//
// `tsc` (strict) is the check that the document types these calls: a field, a path or a
// `codigo` the document does not have fails the build. Each step prints one JSON line. A
// real client also retries as docs/errors.md says; this example makes each call once.
import createClient from "openapi-fetch";

import type { components, paths } from "./api.js";

type ErrorEnvelope = components["schemas"]["ErrorEnvelope"];
// The error bodies an operation can answer: the envelope, with `error.codigo` typed as
// the codigos the document lists for the operation's statuses.
type ErrorBody<Op> = Op extends { responses: infer R }
  ? {
      [S in keyof R]: S extends 200
        ? never
        : R[S] extends { content: { "application/json": infer B } }
          ? B
          : never;
    }[keyof R]
  : never;
type ResolveError = ErrorBody<paths["/api/v1/fan/resolve"]["post"]>;

const baseUrl = process.env.LOYALTY_URL ?? "http://127.0.0.1:8080";
const key = process.env.LOYALTY_KEY ?? "lp_vivo_DemoCajaPrincipalTodos0000001";
const idExterno = process.env.LOYALTY_ID_EXTERNO ?? `ts-${Date.now()}`;

const client = createClient<paths>({
  baseUrl,
  headers: { Authorization: `Bearer ${key}` },
});

const print = (step: string, fields: Record<string, unknown>): void => {
  console.log(JSON.stringify({ paso: step, ...fields }));
};

// A failure of any operation: the status and the contract's envelope, never a guess.
class CallFailed extends Error {
  constructor(
    readonly status: number,
    readonly envelope: ErrorEnvelope,
  ) {
    super(`${status} ${envelope.error.codigo}: ${envelope.error.mensaje}`);
  }
}

function ok<T>(result: { data?: T; error?: ErrorEnvelope; response: Response }): T {
  if (result.data !== undefined) return result.data;
  if (result.error !== undefined) throw new CallFailed(result.response.status, result.error);
  throw new Error(`HTTP ${result.response.status} with neither data nor an error envelope`);
}

// What a till shows for a fan lookup that failed: a switch over the codigos the document
// gives for the operation (a case it does not list would not compile).
function tillMessage(envelope: ResolveError): string {
  switch (envelope.error.codigo) {
    case "fan_no_encontrado":
      return "Fan no encontrado: pida otro dato (correo, QR).";
    case "permiso_denegado":
    case "clave_invalida":
    case "no_autenticado":
      return "La caja no está autorizada.";
    case "demasiadas_llamadas":
    case "servicio_no_disponible":
      return "Reintente en unos segundos.";
    default:
      return envelope.error.mensaje;
  }
}

try {
  const ping = ok(await client.GET("/api/v1/ping"));
  print("ping", { ok: ping.ok, programa: ping.data.programa, modo: ping.data.modo });

  const resolved = ok(await client.POST("/api/v1/fan/resolve", { body: { fan: "DEMO0001" } }));
  print("resolve", {
    fan: resolved.data.fan.id,
    puntos: resolved.data.fan.puntos,
    promo: resolved.data.promo?.codigo ?? null,
  });

  const sale = { id_externo: idExterno, fan: "DEMO0002", importe: "125.50", terminal: "Caja TS" };
  for (const step of ["tx", "tx_retry"]) {
    const answer = ok(await client.POST("/api/v1/tx", { body: sale }));
    print(step, {
      duplicado: answer.data.duplicado,
      tx: answer.data.tx,
      puntos_otorgados: answer.data.puntos_otorgados,
      puntos_acreditados: answer.data.puntos_acreditados,
      saldo: answer.data.saldo,
    });
  }

  // A batch redeem: its answer is the document's RedeemBatchData (the single form's is
  // RedeemSingleData), each entry an ok or an error entry, told apart by `ok`.
  const redeemed = ok(
    await client.POST("/api/v1/redeem", {
      body: { codigos: ["HD-0004", "HD-9999"], terminal: "Caja TS" },
    }),
  );
  if (!("resumen" in redeemed.data)) throw new Error("a batch redeem answered the single form");
  print("redeem", {
    resumen: redeemed.data.resumen,
    resultados: redeemed.data.resultados.map((entry) =>
      entry.ok
        ? { codigo: entry.codigo, puntos_acreditados: entry.puntos_acreditados }
        : { codigo: entry.codigo, error: entry.error.codigo },
    ),
  });

  const missing = await client.POST("/api/v1/fan/resolve", { body: { fan: "NOEXISTE99" } });
  if (missing.error === undefined) throw new Error("an unknown fan was resolved");
  if (missing.response.status !== 404) throw new CallFailed(missing.response.status, missing.error);
  const envelope: ResolveError = missing.error;
  print("error", {
    status: missing.response.status,
    ok: envelope.ok,
    codigo: envelope.error.codigo,
    mensaje: envelope.error.mensaje,
    detalle: envelope.error.detalle ?? null,
    caja: tillMessage(envelope),
  });
} catch (failure) {
  if (failure instanceof CallFailed) {
    print("fallo", { status: failure.status, error: failure.envelope.error });
  } else {
    print("fallo", { error: String(failure) });
  }
  process.exitCode = 1;
}
