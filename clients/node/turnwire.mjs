// Turnwire's public API from Node.js: @grpc/grpc-js with @grpc/proto-loader,
// loading the .proto files at run time (no generated code, no build step):
// the copy packed into this package (proto/, written by copy-protos.mjs when
// `npm pack` runs), or in a checkout the repository's own proto/ directory.
// See docs/CLIENTS.md.
//
// Three rules every non-Python client has to get right, all kept here:
// 1. uint64 fields (event sequences, Operation.last_event_sequence, byte
//    sizes) arrive as decimal *strings* (proto-loader `longs: String`): a JS
//    number loses precision past 2^53. Pass them back as strings, compare
//    them with BigInt.
// 2. Every call carries `authorization: Bearer <token>` metadata.
// 3. A refused call's typed reason is not in the message text: it is a
//    google.rpc.ErrorInfo inside the google.rpc.Status in the
//    `grpc-status-details-bin` trailer. decodeStatusDetails() reads it with the
//    google/rpc protos shipped in proto/vendor/.

import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const PACKED_PROTOS = path.join(here, "proto");
/** Turnwire's .proto files, with the vendored google/rpc protos in its vendor/ directory. */
export const PROTO_ROOT = existsSync(path.join(PACKED_PROTOS, "turnwire"))
  ? PACKED_PROTOS
  : path.resolve(here, "../../proto");
export const INCLUDE_DIRS = [PROTO_ROOT, path.join(PROTO_ROOT, "vendor")];

/** proto-loader options: uint64 as strings, enums by name, every field present. */
export const LOADER_OPTIONS = {
  keepCase: true, // field names as in the .proto (operation_id, not operationId)
  longs: String, // uint64/int64 -> "12345678901234567890", never a lossy number
  enums: String, // OPERATION_STATE_SUCCEEDED, not 6
  bytes: Buffer,
  defaults: true, // unset scalars read as 0 / "" / false, as in proto3
  oneofs: true,
  includeDirs: INCLUDE_DIRS,
};

/** The TurnService client constructor, loaded from proto/. */
export function loadTurnService(protoRoot = PROTO_ROOT) {
  const definition = protoLoader.loadSync("turnwire/coordinator/v1/coordinator.proto", {
    ...LOADER_OPTIONS,
    includeDirs: [protoRoot, path.join(protoRoot, "vendor")],
  });
  return grpc.loadPackageDefinition(definition).turnwire.coordinator.v1.TurnService;
}

/**
 * A TurnService client. With `caFile` it speaks TLS (the certificate `turnwire up`
 * prints as "CA ..."); without it, plaintext, which the coordinator only serves
 * on loopback.
 */
export async function connect(address, { caFile } = {}) {
  const TurnService = loadTurnService();
  const credentials = caFile
    ? grpc.credentials.createSsl(await readFile(caFile))
    : grpc.credentials.createInsecure();
  return new TurnService(address, credentials);
}

/** Call metadata with the bearer token (the principal comes from it, never from the body). */
export function bearer(token) {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

/** A unary call as a promise, with a deadline in seconds. */
export function unary(client, method, request, metadata, seconds = 10) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: deadlineIn(seconds) }, (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
  });
}

export function deadlineIn(seconds) {
  return new Date(Date.now() + seconds * 1000);
}

let rpcTypes;
/** google.rpc.Status and its detail types, from proto/vendor (protobufjs, loaded once). */
function googleRpcTypes() {
  if (rpcTypes === undefined) {
    const root = new protobuf.Root();
    // Resolve imports against the include dirs; google/protobuf/*.proto are
    // built into protobufjs, so an unresolved name is passed through as is.
    root.resolvePath = (_origin, target) => {
      for (const directory of INCLUDE_DIRS) {
        const candidate = path.join(directory, target);
        if (existsSync(candidate)) return candidate;
      }
      return target;
    };
    root.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"], {
      keepCase: true,
    });
    rpcTypes = {
      Status: root.lookupType("google.rpc.Status"),
      details: {
        "google.rpc.ErrorInfo": root.lookupType("google.rpc.ErrorInfo"),
        "google.rpc.RetryInfo": root.lookupType("google.rpc.RetryInfo"),
        "google.rpc.BadRequest": root.lookupType("google.rpc.BadRequest"),
      },
    };
  }
  return rpcTypes;
}

const TO_OBJECT = { longs: String, enums: String, defaults: true };

/**
 * The typed part of a gRPC error: {code, codeName, message, errorInfo, retryInfo}.
 * errorInfo is {reason, domain, metadata} (reason: an ErrorReason name without its
 * "ERROR_REASON_" prefix, domain "turnwire.dev"), or null when the trailer is absent
 * (a transport failure, not a Turnwire refusal).
 */
export function decodeStatusDetails(error) {
  const codeName = Object.keys(grpc.status).find((name) => grpc.status[name] === error.code);
  const decoded = { code: error.code, codeName, message: error.details, errorInfo: null };
  const raw = error.metadata?.get("grpc-status-details-bin") ?? [];
  if (raw.length === 0) return decoded;
  const { Status, details } = googleRpcTypes();
  const status = Status.decode(raw[0]);
  for (const any of status.details) {
    const typeName = any.type_url.slice(any.type_url.lastIndexOf("/") + 1);
    const type = details[typeName];
    if (type === undefined) continue;
    const value = type.toObject(type.decode(any.value), TO_OBJECT);
    if (typeName === "google.rpc.ErrorInfo") decoded.errorInfo = value;
    else if (typeName === "google.rpc.RetryInfo") decoded.retryInfo = value;
    else if (typeName === "google.rpc.BadRequest") decoded.badRequest = value;
  }
  return decoded;
}

const TERMINAL = new Set([
  "OPERATION_STATE_SUCCEEDED",
  "OPERATION_STATE_FAILED",
  "OPERATION_STATE_CANCELLED",
  "OPERATION_STATE_TIMED_OUT",
  "OPERATION_STATE_PROTOCOL_ERROR",
  "OPERATION_STATE_REJECTED",
]);

export function isTerminal(state) {
  return TERMINAL.has(state);
}

/**
 * Watch one operation from `afterSequence` (a uint64 string). Resolves with
 * {events, operation, cursor} when the stream ends (after the terminal event) or
 * when `until(event)` returns true (the call is then cancelled; the turn is not).
 */
export function watch(client, operationId, afterSequence, metadata, { seconds, until } = {}) {
  return new Promise((resolve, reject) => {
    const events = [];
    let operation = null;
    let cursor = afterSequence;
    let settled = false;
    const call = client.WatchOperation(
      { operation_id: operationId, after_sequence: afterSequence },
      metadata,
      { deadline: deadlineIn(seconds ?? 60) },
    );
    const finish = () => {
      if (!settled) {
        settled = true;
        resolve({ events, operation, cursor });
      }
    };
    call.on("data", (message) => {
      events.push(message.event);
      operation = message.operation;
      // Sequences are strings; BigInt compares them exactly.
      if (BigInt(message.event.sequence) <= BigInt(cursor)) {
        settled = true;
        call.cancel();
        reject(new Error(`sequence went backwards: ${message.event.sequence} after ${cursor}`));
        return;
      }
      cursor = message.event.sequence;
      if (until?.(message.event)) {
        finish();
        call.cancel();
      }
    });
    call.on("end", finish);
    call.on("error", (error) => {
      if (error.code === grpc.status.CANCELLED && settled) return; // our own cancel
      if (!settled) {
        settled = true;
        reject(error);
      }
    });
  });
}
