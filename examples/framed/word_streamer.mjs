#!/usr/bin/env node
// A framed subprocess executor in JavaScript (Node.js 18+, no packages):
// the turnwire.framed.v1 protocol of docs/EXECUTORS.md.
//
//   --executor words-js=subprocess+framed:node examples/framed/word_streamer.mjs
//
// stdin:  the request, one JSON line (then runner notices, one per line).
// stdout: one JSON frame per line: chunk, heartbeat, then result or error.
// SIGTERM (a cancel, a deadline, a heartbeat timeout): it says nothing took
// effect downstream and exits 75.
import { createInterface } from "node:readline";

const send = (frame) => process.stdout.write(JSON.stringify(frame) + "\n");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

process.on("SIGTERM", () => {
  send({ type: "error", message: "stopped by the runner", effect: "none" });
  process.exit(75);
});

const lines = createInterface({ input: process.stdin });
const request = JSON.parse(await new Promise((resolve) => lines.once("line", resolve)));
const notices = []; // {"type":"refused",...}: the runner dropped a chunk
lines.on("line", (line) => notices.push(JSON.parse(line)));
const prompt = request.items.map((item) => item.text ?? "").join(" ");
const pause = Number(request.envelope.model?.parameters?.pause_ms ?? "50");
const words = prompt.split(/\s+/).filter(Boolean).map((w) => w.toUpperCase());
for (const word of words) {
  send({ type: "chunk", text: word + " " });
  await sleep(pause);
  send({ type: "heartbeat" });
}
send({
  type: "result",
  text: words.join(" "),
  metadata: { words: String(words.length), refused: String(notices.length) },
});
lines.close();
