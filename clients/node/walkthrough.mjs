#!/usr/bin/env node
// A Turnwire client in Node.js (grpc-js), end to end against a live coordinator:
//   1. submit a turn and watch it to its terminal state;
//   2. submit a slow turn, wait until it runs, cancel it, watch it end;
//   3. make a call the coordinator refuses and decode its google.rpc.ErrorInfo.
// Prints one JSON summary on stdout; exit 0 when every step behaved as the
// contract says, 1 otherwise (the summary's "problems" says why), 2 on bad usage.
//
//   node clients/node/walkthrough.mjs --address HOST:PORT --token TOKEN [--ca-file CA.pem]
//
// Flags fall back to TURNWIRE_ADDRESS, TURNWIRE_TOKEN and TURNWIRE_CA_FILE, the
// variables `turnwire up` prints. See docs/CLIENTS.md.

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import {
  bearer,
  connect,
  decodeStatusDetails,
  isTerminal,
  unary,
  watch,
} from "./turnwire.mjs";

const USAGE = `usage: node clients/node/walkthrough.mjs --address HOST:PORT --token TOKEN [options]

  --address HOST:PORT  the coordinator (env TURNWIRE_ADDRESS)
  --token TOKEN        a bearer token with the submit, read and cancel scopes (env TURNWIRE_TOKEN)
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

function summarizeOperation(operation) {
  return {
    operation_id: operation.operation_id,
    state: operation.state,
    execution: operation.execution,
    stop_reason: operation.stop_reason,
    cancel_requested: operation.cancel_requested,
    // uint64: a decimal string, exactly as proto-loader (longs: String) decodes it.
    last_event_sequence: operation.last_event_sequence,
    error_reason: operation.error?.reason ?? "",
    output_text: operation.result ? operation.result.output.toString("utf8") : null,
  };
}

async function submitAndWatch(client, metadata, timeout) {
  const submitted = await unary(
    client,
    "SubmitTurn",
    { idempotency_key: `node-${randomUUID()}`, turn: turn("hello from node") },
    metadata,
  );
  const operationId = submitted.operation.operation_id;
  const watched = await watch(client, operationId, "0", metadata, { seconds: timeout });
  return {
    operation_id: operationId,
    replayed: submitted.replayed,
    events: watched.events.map((event) => ({
      sequence: event.sequence,
      to_state: event.to_state,
      execution: event.execution,
    })),
    sequence_type: typeof watched.events[0]?.sequence,
    operation: summarizeOperation(watched.operation),
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
  const cancelled = await unary(client, "CancelOperation", { operation_id: operationId }, metadata);
  // Resume from the cursor (a uint64 string) to the terminal event: no event is seen twice.
  const rest = await watch(client, operationId, running.cursor, metadata, { seconds: timeout });
  return {
    operation_id: operationId,
    state_before_cancel: running.operation?.state ?? null,
    resumed_after_sequence: running.cursor,
    cancel_reply_state: cancelled.operation.state,
    events_after_cancel: rest.events.map((event) => `${event.sequence}:${event.to_state}`),
    operation: summarizeOperation(rest.operation ?? cancelled.operation),
  };
}

async function refusedCall(client, metadata) {
  // A turn without a kind: refused INVALID_ARGUMENT / TURN_INVALID, nothing stored.
  const request = { idempotency_key: `node-${randomUUID()}`, turn: turn("no kind") };
  request.turn.kind = "TURN_KIND_UNSPECIFIED";
  try {
    const reply = await unary(client, "SubmitTurn", request, metadata);
    return { refused: false, operation_id: reply.operation.operation_id };
  } catch (error) {
    if (error.code === undefined) throw error;
    return { refused: true, ...decodeStatusDetails(error) };
  }
}

function problemsWith(summary) {
  const problems = [];
  const first = summary.submitted.operation;
  if (first.state !== "OPERATION_STATE_SUCCEEDED") problems.push(`first turn ended ${first.state}`);
  if (summary.submitted.sequence_type !== "string") {
    problems.push(`uint64 sequence decoded as ${summary.submitted.sequence_type}, not string`);
  }
  const second = summary.cancelled.operation;
  if (second.state !== "OPERATION_STATE_CANCELLED") {
    problems.push(`cancelled turn ended ${second.state}`);
  }
  if (!summary.refused.refused) problems.push("the malformed turn was accepted");
  else if (!summary.refused.errorInfo) problems.push("the refusal carried no google.rpc.ErrorInfo");
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
      refused: await refusedCall(client, metadata),
    };
    summary.problems = problemsWith(summary);
    summary.elapsed_ms = Date.now() - started;
    process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    return summary.problems.length === 0 ? 0 : 1;
  } catch (error) {
    const failure = error.code === undefined ? { message: String(error) } : decodeStatusDetails(error);
    process.stdout.write(`${JSON.stringify({ address: args.address, failed: failure }, null, 2)}\n`);
    return 1;
  } finally {
    client.close();
  }
}

process.exitCode = await main();
