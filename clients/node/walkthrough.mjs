#!/usr/bin/env node
// A Turnwire client in Node.js (grpc-js), end to end against a live coordinator:
//   1. submit a turn with an idempotency key, submit it again (a replay: the
//      same operation), and watch it to its terminal state;
//   2. submit a slow turn, watch until it runs, cancel it, and resume the watch
//      from the last sequence seen to the terminal state;
//   3. decode the google.rpc.ErrorInfo of three refusals: the key reused for
//      another turn, a call without a token, and another principal's read.
// Prints one JSON summary on stdout; exit 0 when every step behaved as the
// contract says, 1 otherwise (the summary's "problems" says why), 2 on bad usage.
//
//   node walkthrough.mjs --address HOST:PORT --token TOKEN --other-token TOKEN [--ca-file CA.pem]
//
// Flags fall back to TURNWIRE_ADDRESS, TURNWIRE_TOKEN, TURNWIRE_OTHER_TOKEN and
// TURNWIRE_CA_FILE. See docs/CLIENTS.md.

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import grpc from "@grpc/grpc-js";

import {
  bearer,
  connect,
  decodeStatusDetails,
  isTerminal,
  unary,
  watch,
} from "./turnwire.mjs";

const USAGE = `usage: node walkthrough.mjs --address HOST:PORT --token TOKEN --other-token TOKEN [options]

  --address HOST:PORT  the coordinator (env TURNWIRE_ADDRESS)
  --token TOKEN        a bearer token with the submit, read and cancel scopes (env TURNWIRE_TOKEN)
  --other-token TOKEN  another principal's token with the read scope (env TURNWIRE_OTHER_TOKEN)
  --ca-file FILE       TLS, trusting this CA (env TURNWIRE_CA_FILE; what \`turnwire up\` prints);
                       without it the call is plaintext, which coordinators serve on loopback only
  --timeout SECONDS    give up on a step after this long (default 60)
  --cancel-sleep-ms N  how long the turn that is cancelled would sleep (default 30000)
  -h, --help           this help`;

function usageError(message) {
  process.stderr.write(`error: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        address: { type: "string", default: process.env.TURNWIRE_ADDRESS },
        token: { type: "string", default: process.env.TURNWIRE_TOKEN },
        "other-token": { type: "string", default: process.env.TURNWIRE_OTHER_TOKEN },
        "ca-file": { type: "string", default: process.env.TURNWIRE_CA_FILE || undefined },
        timeout: { type: "string", default: "60" },
        "cancel-sleep-ms": { type: "string", default: "30000" },
        help: { type: "boolean", short: "h", default: false },
      },
    }).values;
  } catch (error) {
    usageError(error.message);
  }
  if (parsed.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (!parsed.address) usageError("--address (or TURNWIRE_ADDRESS) is required");
  if (!parsed.token) usageError("--token (or TURNWIRE_TOKEN) is required");
  if (!parsed["other-token"]) usageError("--other-token (or TURNWIRE_OTHER_TOKEN) is required");
  const timeout = Number(parsed.timeout);
  const sleepMs = Number(parsed["cancel-sleep-ms"]);
  if (!(timeout > 0)) usageError("--timeout must be a positive number of seconds");
  if (!Number.isInteger(sleepMs) || sleepMs < 0) usageError("--cancel-sleep-ms must be >= 0");
  return { ...parsed, timeout, sleepMs };
}

function turn(text, parameters = {}) {
  return {
    // kind is required: it picks the runner's slot pool (PROTOCOL.md R4).
    kind: "TURN_KIND_WRITABLE",
    model: { provider: "example", name: "echo", parameters },
    input_items: [
      { item_id: "1", role: "user", content_type: "text/plain", content: Buffer.from(text) },
    ],
  };
}

/** Events as "sequence:state"; a uint64 sequence is a decimal string (longs: String). */
function rendered(events) {
  return events.map((event) => `${event.sequence}:${event.to_state}`);
}

async function submitAndWatch(client, metadata, timeout) {
  const key = `node-${randomUUID()}`;
  const request = { idempotency_key: key, turn: turn("hello from node") };
  const first = await unary(client, "SubmitTurn", request, metadata);
  // The same key with the same request: a replay, never a second operation.
  const again = await unary(client, "SubmitTurn", request, metadata);
  const operationId = first.operation.operation_id;
  const watched = await watch(client, operationId, "0", metadata, { seconds: timeout });
  const operation = watched.operation;
  return {
    operation_id: operationId,
    idempotency_key: key,
    replayed: again.replayed,
    replay_operation_id: again.operation.operation_id,
    events: rendered(watched.events),
    state: operation.state,
    last_event_sequence: operation.last_event_sequence,
    output_text: operation.result ? operation.result.output.toString("utf8") : null,
  };
}

async function cancelWhileRunning(client, metadata, timeout, sleepMs) {
  const submitted = await unary(
    client,
    "SubmitTurn",
    {
      idempotency_key: `node-${randomUUID()}`,
      turn: turn("cancel me", { sleep_ms: String(sleepMs) }),
    },
    metadata,
  );
  const operationId = submitted.operation.operation_id;
  // Watch until the runner confirms the start (or the turn ends on its own), then stop watching.
  const running = await watch(client, operationId, "0", metadata, {
    seconds: timeout,
    until: (event) =>
      event.to_state === "OPERATION_STATE_RUNNING" || isTerminal(event.to_state),
  });
  await unary(client, "CancelOperation", { operation_id: operationId }, metadata);
  // Resume from the cursor (a uint64 string): every later event exactly once.
  const rest = await watch(client, operationId, running.cursor, metadata, { seconds: timeout });
  return {
    operation_id: operationId,
    state_before_cancel: running.operation?.state ?? null,
    resumed_after_sequence: running.cursor,
    events_after_cancel: rendered(rest.events),
    state: rest.operation.state,
    stop_reason: rest.operation.stop_reason,
  };
}

/** A failed call's code name and ErrorInfo (reason, domain, metadata). */
function described(error) {
  const { codeName, errorInfo } = decodeStatusDetails(error);
  return { refused: true, code: codeName, ...(errorInfo ?? {}) };
}

/** A refused call, described; a call that went through is {refused: false}. */
async function refusal(call) {
  try {
    await call();
    return { refused: false };
  } catch (error) {
    if (error.code === undefined) throw error;
    return described(error);
  }
}

async function refusals(client, metadata, otherMetadata, submitted) {
  const read = { operation_id: submitted.operation_id };
  return {
    // The first turn's key with another turn: IDEMPOTENCY_KEY_REUSED, nothing stored.
    idempotency_key_reused: await refusal(() =>
      unary(
        client,
        "SubmitTurn",
        { idempotency_key: submitted.idempotency_key, turn: turn("another turn") },
        metadata,
      ),
    ),
    // No authorization metadata at all: UNAUTHENTICATED / CREDENTIALS_MISSING.
    missing_token: await refusal(() => unary(client, "GetOperation", read, new grpc.Metadata())),
    // Another principal reads the first turn: NOT_FOUND, exactly like a random id (§7).
    cross_tenant_read: await refusal(() => unary(client, "GetOperation", read, otherMetadata)),
  };
}

const EXPECTED_REASONS = {
  idempotency_key_reused: "IDEMPOTENCY_KEY_REUSED",
  missing_token: "CREDENTIALS_MISSING",
  cross_tenant_read: "OPERATION_NOT_FOUND",
};

function problemsWith(summary) {
  const problems = [];
  const { submitted, cancelled } = summary;
  if (submitted.state !== "OPERATION_STATE_SUCCEEDED") {
    problems.push(`first turn ended ${submitted.state}`);
  }
  if (!submitted.replayed || submitted.replay_operation_id !== submitted.operation_id) {
    problems.push("the same key and request did not replay the first operation");
  }
  if (cancelled.state !== "OPERATION_STATE_CANCELLED") {
    problems.push(`cancelled turn ended ${cancelled.state}`);
  }
  for (const [name, reason] of Object.entries(EXPECTED_REASONS)) {
    const got = summary.refusals[name].reason;
    if (got !== reason) problems.push(`${name}: reason ${got}, want ${reason}`);
  }
  return problems;
}

async function main() {
  const args = options();
  const client = await connect(args.address, { caFile: args["ca-file"] });
  const metadata = bearer(args.token);
  const started = Date.now();
  try {
    const summary = {
      address: args.address,
      tls: Boolean(args["ca-file"]),
      submitted: await submitAndWatch(client, metadata, args.timeout),
      cancelled: await cancelWhileRunning(client, metadata, args.timeout, args.sleepMs),
    };
    summary.refusals = await refusals(
      client,
      metadata,
      bearer(args["other-token"]),
      summary.submitted,
    );
    summary.problems = problemsWith(summary);
    summary.elapsed_ms = Date.now() - started;
    process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    return summary.problems.length === 0 ? 0 : 1;
  } catch (error) {
    const failure =
      error.code === undefined ? { message: String(error) } : { ...described(error), message: error.details };
    process.stdout.write(`${JSON.stringify({ address: args.address, failed: failure }, null, 2)}\n`);
    return 1;
  } finally {
    client.close();
  }
}

process.exitCode = await main();
