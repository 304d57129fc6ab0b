// A native gRPC caller of loyalty.v1.PosService from Node.js (README "Native gRPC
// clients"), with @grpc/grpc-js, @grpc/proto-loader and the repository's protos alone:
// it pings, resolves a fan (the typed `promo_detalle`), registers a sale with the typed
// fields (`importe_centavos_entero`, `ts_utc`) and decodes the google.rpc.ErrorInfo of a
// failure from `grpc-status-details-bin` with the shipped google/rpc protos.
//
//   npm ci
//   LOYALTY_TARGET=127.0.0.1:50051 LOYALTY_KEY=lp_vivo_DemoCajaPrincipalTodos0000001 node client.mjs
//
// Each step prints one JSON line. A real client also retries as README "Retrying calls"
// says (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED with RetryInfo; the same
// id_externo); this example makes each call once.
import path from "node:path";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoRoot = process.env.LOYALTY_PROTO_DIR ?? path.resolve(here, "../../proto");
const target = process.env.LOYALTY_TARGET ?? "127.0.0.1:50051";
const key = process.env.LOYALTY_KEY ?? "lp_vivo_DemoCajaPrincipalTodos0000001";
const idExterno = process.env.LOYALTY_ID_EXTERNO ?? `node-${Date.now()}`;

const definition = protoLoader.loadSync(
  ["loyalty/v1/pos_service.proto", "google/rpc/status.proto", "google/rpc/error_details.proto"],
  {
    includeDirs: [protoRoot, path.join(protoRoot, "third_party/googleapis")],
    keepCase: true, // the contract's snake_case names
    longs: Number,
    enums: String,
    defaults: true, // false, 0 and "" as values (proto3 does not send them)
    oneofs: true,
  },
);
const loyalty = grpc.loadPackageDefinition(definition).loyalty.v1;
const Status = definition["google.rpc.Status"];
const ErrorInfo = definition["google.rpc.ErrorInfo"];

const client = new loyalty.PosService(target, grpc.credentials.createInsecure());

function call(method, request) {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${key}`);
  const deadline = new Date(Date.now() + 20_000); // longer than the server's 15 s
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline }, (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

// The ErrorInfo of a failed call: google.rpc.Status in grpc-status-details-bin.
function errorInfo(error) {
  const [raw] = error.metadata?.get("grpc-status-details-bin") ?? [];
  if (raw === undefined) return null;
  const status = Status.deserialize(raw);
  const detail = status.details.find(
    (any) => any.type_url === "type.googleapis.com/google.rpc.ErrorInfo",
  );
  return detail ? ErrorInfo.deserialize(detail.value) : null;
}

const print = (step, fields) => console.log(JSON.stringify({ paso: step, ...fields }));

try {
  const ping = await call("Ping", {});
  print("ping", { programa: ping.data.programa, modo: ping.data.modo });

  const resolved = await call("ResolveFan", { fan: "DEMO0001" });
  print("resolve", {
    fan: resolved.data.fan.id,
    puntos: resolved.data.fan.puntos,
    promo: resolved.data.promo_detalle?.codigo ?? null,
  });

  const now = Math.floor(Date.now() / 1000);
  const sale = await call("RegisterTx", {
    id_externo: idExterno,
    fan: "DEMO0002",
    importe_centavos_entero: 12550, // a plain number: no google.protobuf.Value to build
    ts_utc: { seconds: now - 60, nanos: 0 },
    terminal: "Caja Node",
  });
  print("tx", {
    duplicado: sale.data.duplicado,
    tx: sale.data.tx,
    puntos_otorgados: sale.data.puntos_otorgados,
    puntos_acreditados: sale.data.puntos_acreditados,
  });

  try {
    await call("ResolveFan", { fan: "NADIE0000" });
    print("error", { inesperado: "no falló" });
    process.exitCode = 1;
  } catch (error) {
    const info = errorInfo(error);
    print("error", {
      status: grpc.status[error.code],
      codigo: info?.reason ?? null,
      mensaje: info?.metadata?.mensaje ?? null,
      detalle: info?.metadata?.detalle ?? null,
    });
  }
} catch (error) {
  console.error(`unexpected failure: ${error.message}`);
  process.exitCode = 1;
} finally {
  client.close();
}
