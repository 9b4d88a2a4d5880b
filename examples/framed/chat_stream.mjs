#!/usr/bin/env node
// A framed executor for an OpenAI-compatible chat-completions API, in JavaScript
// (Node.js 20+, no packages: the global fetch). The turnwire.framed.v1 protocol
// of docs/EXECUTORS.md; the same behaviour as examples/http/openai_chat.py.
//
//   --executor "chat-js=subprocess+framed:exec node examples/framed/chat_stream.mjs"
//
// It POSTs {OPENAI_BASE_URL}/chat/completions with stream: true, the turn's
// model name, its items as messages and the API's parameters, and the
// operation id as the Idempotency-Key header (the same on every attempt: a
// provider that honours it never generates twice for one turn). Each token of
// the server-sent events goes out as a chunk frame; the whole text is the result.
//
// Configuration from the runner's environment (never the turn: the turn is
// journaled and readable by whoever may read the operation): OPENAI_BASE_URL
// (default https://api.openai.com/v1), OPENAI_API_KEY, OPENAI_TIMEOUT (seconds
// of silence from the server before the call is abandoned, default 60).
//
// What a failure declares (the error frame's "effect"):
//   429 or 5xx before any token, or no connection at all -> "none" (+ retry_after)
//   anything after the first token                        -> "applied"
//   anything else (a timeout after sending, a 200 stream that breaks before
//   its first token, a 4xx a retry cannot fix)            -> not declared: unknown
import { createInterface } from "node:readline";

const send = (frame) => process.stdout.write(JSON.stringify(frame) + "\n");
const NUMBERS = new Set(["temperature", "top_p", "presence_penalty", "frequency_penalty"]);
const INTEGERS = new Set(["max_tokens", "max_completion_tokens", "seed", "n"]);
const STRINGS = new Set(["stop", "user"]);
// Connection failures: the request never left this machine.
const NOT_CONNECTED = new Set([
  "ECONNREFUSED", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN",
  "UND_ERR_CONNECT_TIMEOUT",
]);

let tokens = 0; // content deltas received: any means the provider acted
let sent = false; // whether fetch may have sent the request
const abort = new AbortController();

// The final frame, once; then exit (75: nothing took effect, 76: something did).
let finished = false;
function fail(message, effect, retryAfter) {
  if (finished) return;
  finished = true;
  const frame = { type: "error", message };
  if (effect) frame.effect = effect;
  if (effect === "none" && retryAfter !== undefined) frame.retry_after = retryAfter;
  send(frame);
  process.exitCode = effect === "none" ? 75 : effect === "applied" ? 76 : 1;
  abort.abort();
}

// Stopped by the runner (cancel, deadline, heartbeat timeout): close the stream
// and say what took effect.
process.on("SIGTERM", () => {
  if (tokens > 0) fail(`stopped by the runner after ${tokens} tokens`, "applied");
  else if (!sent) fail("stopped by the runner before the request was sent", "none");
  else fail("stopped by the runner while waiting for the first token");
  setTimeout(() => process.exit(), 100).unref();
});

const lines = createInterface({ input: process.stdin });
const request = JSON.parse(await new Promise((resolve) => lines.once("line", resolve)));
lines.on("line", () => {}); // runner notices (a refused chunk): the result holds all

const model = request.envelope?.model ?? {};
const body = {
  model: model.name ?? "",
  messages: request.items.map((item) => ({ role: item.role || "user", content: item.text ?? "" })),
  stream: true,
  stream_options: { include_usage: true },
};
let invalid = ""; // bad input: fail before anything is sent (a retry would fail the same)
for (const [name, value] of Object.entries(model.parameters ?? {})) {
  if (!NUMBERS.has(name) && !INTEGERS.has(name) && !STRINGS.has(name)) continue; // not the API's
  const parsed = NUMBERS.has(name) ? Number(value) : INTEGERS.has(name) ? Number.parseInt(value, 10) : value;
  if (Number.isNaN(parsed)) invalid = `parameter ${name}=${JSON.stringify(value)} is not a number`;
  body[name] = parsed;
}

const baseUrl = (process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1").replace(/\/+$/, "");
const url = `${baseUrl}/chat/completions`;
const headers = {
  "Content-Type": "application/json",
  Accept: "text/event-stream",
  "Idempotency-Key": request.operation_id,
};
if (process.env.OPENAI_API_KEY) headers.Authorization = `Bearer ${process.env.OPENAI_API_KEY}`;
const silenceMs = Number(process.env.OPENAI_TIMEOUT ?? "60") * 1000;

// A heartbeat while the call is in flight; a silent server is caught by the
// read timeout (the watchdog below), which fails the turn.
const pulse = setInterval(() => send({ type: "heartbeat" }), 1000);
let lastByte = Date.now();
let timedOut = false;
const watchdog = setInterval(() => {
  if (Date.now() - lastByte > silenceMs) {
    timedOut = true;
    abort.abort();
  }
}, 50);

const parts = [];
let finishReason = "";
let usage = {};
let done = false;

function take(data) {
  if (data === "[DONE]") return (done = true);
  let event;
  try {
    event = JSON.parse(data);
  } catch {
    throw new Error(`an event is not JSON: ${JSON.stringify(data.slice(0, 80))}`);
  }
  if (event.error) throw new Error(`the API sent an error event: ${event.error.message ?? ""}`);
  if (event.usage) usage = event.usage;
  for (const choice of event.choices ?? []) {
    if ((choice.index ?? 0) !== 0) continue; // the first choice only
    const content = choice.delta?.content;
    if (typeof content === "string" && content) {
      tokens += 1;
      parts.push(content);
      send({ type: "chunk", text: content });
    }
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
  return false;
}

function errorText(text) {
  try {
    const payload = JSON.parse(text);
    if (payload?.error?.message) return String(payload.error.message).slice(0, 200);
  } catch {} // not JSON: the text itself
  return text.slice(0, 200);
}

async function call() {
  sent = true; // from here on, bytes may have reached the server
  let response;
  try {
    response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body), signal: abort.signal });
  } catch (error) {
    if (NOT_CONNECTED.has(error.cause?.code)) {
      return fail(`could not connect to ${url}: ${error.cause.code}`, "none");
    }
    throw error;
  }
  lastByte = Date.now();
  if (response.status !== 200) {
    const text = errorText(await response.text());
    if (response.status === 429 || response.status >= 500) {
      // Refused before acting on the request (rate limit, overload, outage).
      const header = response.headers.get("retry-after");
      const after = header === null ? NaN : Number(header); // delta-seconds only
      const retryAfter = Number.isFinite(after) && after >= 0 ? Math.min(after, 86400) : undefined;
      return fail(`the API answered ${response.status}: ${text}`, "none", retryAfter);
    }
    return fail(`the API answered ${response.status}: ${text}`); // a retry cannot fix it
  }
  const decoder = new TextDecoder();
  let buffered = "";
  let data = [];
  for await (const bytes of response.body) {
    lastByte = Date.now();
    buffered += decoder.decode(bytes, { stream: true });
    let newline;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline).replace(/\r$/, "");
      buffered = buffered.slice(newline + 1);
      if (line === "") {
        if (data.length && take(data.join("\n"))) return;
        data = [];
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      } // comments (":") and other fields are skipped
    }
  }
  if (!done && !finishReason) throw new Error("the event stream ended before [DONE]");
}

try {
  if (invalid) fail(invalid);
  else await call();
} catch (error) {
  const why = timedOut ? `no byte from the server in ${silenceMs / 1000}s` : error.message;
  if (tokens > 0) fail(`the stream broke after ${tokens} tokens: ${why}`, "applied");
  else fail(`the call failed before any token, outcome unknown: ${why}`);
}
clearInterval(pulse);
clearInterval(watchdog);
if (!finished) {
  finished = true;
  const metadata = {
    model: body.model,
    finish_reason: finishReason,
    tokens: String(usage.completion_tokens ?? tokens),
  };
  send({ type: "result", text: parts.join(""), metadata });
}
lines.close();
