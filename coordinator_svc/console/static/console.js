// Turnwire console: plain JavaScript, no build step, nothing loaded from elsewhere.
//
// The admin token lives in this tab's sessionStorage and leaves only as an
// Authorization header on calls to this page's own /api/ (never in a URL).
// Everything the server sends is put on the page with textContent, never as
// HTML. Routes are the URL's fragment: #/operations?state=..., #/operations/ID,
// #/ambiguous, #/runners.
"use strict";

const TOKEN_KEY = "turnwire.console.token";
const session = { principal: "", states: [], executions: [] };
let listCursor = "";

// --- small helpers -----------------------------------------------------------

function $(id) {
  return document.getElementById(id);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function short(name, prefix) {
  return (name || "").startsWith(prefix) ? name.slice(prefix.length) : name || "";
}

const stateOf = (op) => short(op.state, "OPERATION_STATE_");
const executionOf = (value) => short(value, "EXECUTION_");
const verdictOf = (value) => short(value, "VERDICT_");
const outcomeOf = (value) => short(value, "ATTEMPT_OUTCOME_");

function when(text) {
  if (!text) return "";
  const at = new Date(text);
  if (Number.isNaN(at.getTime())) return text;
  return at.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function badge(kind, value) {
  return el("span", { class: `badge ${kind}-${value.toLowerCase()}`, "data-testid": kind }, value);
}

function clip(text, length) {
  return text && text.length > length ? `${text.slice(0, length)}…` : text || "";
}

function flash(message, isError) {
  const box = $("flash");
  box.textContent = message;
  box.className = isError ? "flash error" : "flash";
  box.hidden = !message;
}

// --- the API ------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.reason = error.reason || "";
    this.code = error.code || "";
  }
}

async function api(path, options) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Authorization: `Bearer ${token || ""}` };
  const init = { method: "GET", headers, cache: "no-store", credentials: "omit" };
  if (options && options.body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const failure = new ApiFailure(response.status, body);
    if (response.status === 401) signOut(failure.message);
    throw failure;
  }
  return body;
}

function describe(failure) {
  const reason = failure.reason ? ` (${failure.reason})` : "";
  return `${failure.message}${reason}`;
}

// --- sign in / out ------------------------------------------------------------

function showLogin(message) {
  $("login").hidden = false;
  $("nav").hidden = true;
  $("who").hidden = true;
  for (const view of document.querySelectorAll(".view")) view.hidden = true;
  $("login-error").textContent = message || "";
  $("login-error").hidden = !message;
  $("token").focus();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  session.principal = "";
  flash("");
  showLogin(message);
}

async function startSession() {
  try {
    const reply = await api("/api/session");
    session.principal = reply.principal;
    session.states = reply.states;
    session.executions = reply.executions;
  } catch (failure) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(describe(failure));
    return;
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("principal").textContent = session.principal;
  buildFilterBoxes();
  await route();
  refreshAmbiguousCount();
}

// --- routing ------------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "") };
}

async function route() {
  if (!session.principal) return;
  const { parts, params } = parseHash();
  for (const view of document.querySelectorAll(".view")) view.hidden = true;
  const name = parts[0] || "operations";
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("current", link.dataset.view === name);
  }
  flash("");
  try {
    if (name === "operations" && parts[1]) await showOperation(decodeURIComponent(parts[1]));
    else if (name === "ambiguous") await showAmbiguous();
    else if (name === "runners") await showRunners();
    else await showOperations(params);
  } catch (failure) {
    if (failure instanceof ApiFailure) flash(describe(failure), true);
    else throw failure;
  }
  document.body.dataset.ready = name;
}

// --- operations -----------------------------------------------------------------

function boxes(container, name, values) {
  container.replaceChildren(
    ...values.map((value) =>
      el("label", { class: "box" }, el("input", { type: "checkbox", name, value }), value),
    ),
  );
}

function buildFilterBoxes() {
  boxes($("state-boxes"), "state", session.states);
  boxes($("execution-boxes"), "execution", session.executions);
}

function filtersFromForm() {
  const form = $("filters");
  const params = new URLSearchParams();
  const states = [...form.querySelectorAll("input[name=state]:checked")].map((i) => i.value);
  const executions = [...form.querySelectorAll("input[name=execution]:checked")].map(
    (i) => i.value,
  );
  if (states.length) params.set("state", states.join(","));
  if (executions.length) params.set("execution", executions.join(","));
  for (const key of ["principal", "runner", "pool"]) {
    const value = form.elements[key].value.trim();
    if (value) params.set(key, value);
  }
  return params;
}

function formFromFilters(params) {
  const form = $("filters");
  const chosen = (key) => new Set((params.get(key) || "").split(",").filter(Boolean));
  const states = chosen("state");
  const executions = chosen("execution");
  for (const box of form.querySelectorAll("input[name=state]")) box.checked = states.has(box.value);
  for (const box of form.querySelectorAll("input[name=execution]")) {
    box.checked = executions.has(box.value);
  }
  for (const key of ["principal", "runner", "pool"]) form.elements[key].value = params.get(key) || "";
}

function operationRow(item) {
  const op = item.operation;
  const note = op.error && op.error.reason ? op.error.reason : op.waiting_for || "";
  const verdict = op.verdict && op.verdict.verdict ? `verdict ${verdictOf(op.verdict.verdict)}` : "";
  return el(
    "tr",
    { "data-operation": op.operation_id },
    el("td", {}, el("a", { href: `#/operations/${encodeURIComponent(op.operation_id)}` },
      el("code", {}, op.operation_id))),
    el("td", {}, item.principal),
    el("td", {}, badge("state", stateOf(op))),
    el("td", {}, badge("execution", executionOf(op.execution))),
    el("td", { class: "num" }, `${op.attempt_count}/${op.max_attempts}`),
    el("td", {}, op.runner),
    el("td", {}, when(op.created_at)),
    el("td", { class: "note" }, clip([note, verdict].filter(Boolean).join(" · "), 80)),
  );
}

async function loadOperations(params, append) {
  const query = new URLSearchParams(params);
  query.set("page_size", "50");
  if (append && listCursor) query.set("page_token", listCursor);
  const reply = await api(`/api/operations?${query}`);
  const body = $("operations-body");
  const rows = reply.operations.map(operationRow);
  if (append) body.append(...rows);
  else body.replaceChildren(...rows);
  listCursor = reply.next_page_token || "";
  $("operations-more").hidden = !listCursor;
  $("operations-empty").hidden = body.children.length > 0;
}

async function showOperations(params) {
  $("view-operations").hidden = false;
  formFromFilters(params);
  await loadOperations(params, false);
}

// --- one operation's timeline -------------------------------------------------------

function fact(list, label, value, testid) {
  if (value === undefined || value === null || value === "") return;
  list.append(el("dt", {}, label), el("dd", { "data-testid": testid }, value));
}

function resultText(result) {
  if (!result || !result.output) return "";
  const bytes = Uint8Array.from(atob(result.output), (c) => c.charCodeAt(0));
  const type = result.content_type || "";
  if (type === "" || type.startsWith("text/")) {
    const text = new TextDecoder().decode(bytes);
    return `${clip(text, 200)} (${type || "no content type"}, ${bytes.length} bytes)`;
  }
  return `${type}, ${bytes.length} bytes`;
}

function verdictBlock(verdict) {
  if (!verdict || !verdict.verdict) return null;
  return el(
    "div",
    { class: "verdict", "data-testid": "verdict" },
    el("b", {}, `Operator verdict: ${verdictOf(verdict.verdict).replace("_", " ")}`),
    ` by ${verdict.by} at ${when(verdict.at)}: `,
    el("q", {}, verdict.reason),
  );
}

function timelineItem(event) {
  const from = stateOf({ state: event.from_state });
  const to = stateOf({ state: event.to_state });
  return el(
    "li",
    { "data-sequence": event.sequence },
    el("span", { class: "seq" }, `#${event.sequence}`),
    el("time", {}, when(event.at)),
    el("span", { class: "move" }, from && from !== "UNSPECIFIED" ? `${from} → ` : "", badge("state", to)),
    badge("execution", executionOf(event.execution)),
    event.reason ? el("code", { class: "reason" }, event.reason) : null,
    event.detail ? el("span", { class: "detail" }, event.detail) : null,
  );
}

function attemptRow(attempt) {
  return el(
    "tr",
    {},
    el("td", { class: "num" }, attempt.number),
    el("td", {}, attempt.runner),
    el("td", {}, el("code", {}, clip(attempt.incarnation_id, 12))),
    el("td", {}, el("code", {}, clip(attempt.store_id, 12))),
    el("td", {}, when(attempt.sent_at)),
    el("td", {}, badge("outcome", outcomeOf(attempt.outcome))),
    el("td", { class: "detail" }, attempt.detail),
  );
}

async function showOperation(operationId) {
  $("view-operation").hidden = false;
  const { evidence } = await api(`/api/operations/${encodeURIComponent(operationId)}`);
  const item = evidence.operation;
  const op = item.operation;
  $("op-id").textContent = op.operation_id;
  $("op-badges").replaceChildren(
    badge("state", stateOf(op)),
    badge("execution", executionOf(op.execution)),
  );
  const facts = $("op-facts");
  facts.replaceChildren();
  fact(facts, "principal", item.principal, "op-principal");
  fact(facts, "pool / kind", `${op.pool || "default"} / ${short(op.kind, "TURN_KIND_")}`);
  fact(facts, "attempts", `${op.attempt_count} of ${op.max_attempts}`, "op-attempts");
  fact(facts, "runner", op.runner, "op-runner");
  fact(facts, "incarnation", op.incarnation_id, "op-incarnation");
  fact(facts, "created", when(op.created_at));
  fact(facts, "finished", when(op.finished_at));
  fact(facts, "waiting for", op.waiting_for);
  fact(facts, "stop reason", short(op.stop_reason, "STOP_REASON_").replace("UNSPECIFIED", ""));
  fact(facts, "cancel requested", op.cancel_requested ? "yes" : "");
  if (op.error && op.error.reason) fact(facts, "error", `${op.error.reason}: ${op.error.message}`, "op-error");
  fact(facts, "result", resultText(op.result));
  fact(facts, "envelope sha256", op.envelope_digest);
  fact(facts, "requeued from", op.requeued_from);
  fact(facts, "requeued as", op.requeued_as);
  $("op-verdict").replaceChildren(...[verdictBlock(op.verdict)].filter(Boolean));
  $("op-timeline").replaceChildren(...evidence.events.map(timelineItem));
  const attempts = evidence.attempts || [];
  $("op-attempts").tBodies[0].replaceChildren(...attempts.map(attemptRow));
  $("op-attempts").hidden = attempts.length === 0;
  $("op-no-attempts").hidden = attempts.length > 0;
  const actions = $("op-actions");
  actions.replaceChildren();
  const decided = op.verdict && op.verdict.verdict;
  if (executionOf(op.execution) === "UNKNOWN" && !decided && op.finished_at) {
    actions.append(el("h2", {}, "Record a verdict"), verdictForm(op.operation_id));
  }
  const provenNotRun =
    executionOf(op.execution) === "NOT_STARTED" || (decided && verdictOf(op.verdict.verdict) === "NOT_EXECUTED");
  if (op.finished_at && provenNotRun && !op.requeued_as) {
    actions.append(el("h2", {}, "Requeue"), requeueForm(op.operation_id));
  }
}

function requeueForm(operationId) {
  const form = el(
    "form",
    { class: "requeue-form" },
    el("p", { class: "muted" }, "It did not run: submit its envelope again as a new operation."),
    el("label", {}, "Why", el("input", { name: "reason", required: true, maxlength: 2000 })),
    el("button", { type: "submit" }, "Requeue as a new operation"),
    el("p", { class: "form-result", role: "status" }),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const result = form.querySelector(".form-result");
    try {
      const reply = await api(`/api/operations/${encodeURIComponent(operationId)}/requeue`, {
        body: { reason: form.elements.reason.value.trim() },
      });
      const made = reply.operation.operation.operation_id;
      result.replaceChildren("Requeued as ", el("a", { href: `#/operations/${made}` }, made));
      result.className = "form-result ok";
    } catch (failure) {
      result.textContent = describe(failure);
      result.className = "form-result error";
    }
  });
  return form;
}

// --- the ambiguous queue and the verdict form ------------------------------------------

function verdictForm(operationId) {
  const form = el(
    "form",
    { class: "verdict-form", "data-operation": operationId },
    el("fieldset", {},
      el("legend", {}, "Did this turn execute?"),
      el("label", {}, el("input", { type: "radio", name: "verdict", value: "EXECUTED", required: true }),
        " Executed"),
      el("label", {}, el("input", { type: "radio", name: "verdict", value: "NOT_EXECUTED" }),
        " Not executed")),
    el("label", {}, "Why (the evidence you relied on)",
      el("textarea", { name: "reason", rows: 2, maxlength: 2000, required: true })),
    el("button", { type: "submit" }, "Record verdict"),
    el("p", { class: "form-result", role: "status" }),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const result = form.querySelector(".form-result");
    const verdict = form.elements.verdict.value;
    const reason = form.elements.reason.value.trim();
    try {
      const reply = await api(`/api/operations/${encodeURIComponent(operationId)}/verdict`, {
        body: { verdict, reason },
      });
      const recorded = verdictOf(reply.operation.operation.verdict.verdict);
      result.textContent = `${reply.replayed ? "Already recorded" : "Recorded"}: ${recorded}`;
      result.className = "form-result ok";
      form.dataset.recorded = recorded;
      refreshAmbiguousCount();
    } catch (failure) {
      result.textContent = describe(failure);
      result.className = "form-result error";
    }
  });
  return form;
}

function ambiguousCard(evidence) {
  const item = evidence.operation;
  const op = item.operation;
  const attempts = evidence.attempts || [];
  const decided = op.verdict && op.verdict.verdict;
  return el(
    "article",
    { class: "card", "data-operation": op.operation_id },
    el("h2", {},
      el("a", { href: `#/operations/${encodeURIComponent(op.operation_id)}` }, el("code", {}, op.operation_id)),
      " ", badge("state", stateOf(op)), " ", badge("execution", executionOf(op.execution))),
    el("p", {}, `principal ${item.principal} · ${op.attempt_count} attempt(s) · `,
      op.error && op.error.reason ? `${op.error.reason}: ${op.error.message}` : ""),
    el("table", { class: "grid small" },
      el("thead", {}, el("tr", {}, ...["#", "Runner", "Incarnation", "Store", "Sent", "Outcome", "Detail"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, ...attempts.map(attemptRow))),
    el("details", {}, el("summary", {}, `${evidence.events.length} event(s)`),
      el("ol", { class: "timeline" }, ...evidence.events.map(timelineItem))),
    decided ? verdictBlock(op.verdict) : verdictForm(op.operation_id),
  );
}

async function showAmbiguous() {
  $("view-ambiguous").hidden = false;
  const decided = $("ambiguous-decided").checked ? "&include_decided=true" : "";
  const reply = await api(`/api/ambiguous?page_size=100${decided}`);
  $("ambiguous-list").replaceChildren(...reply.operations.map(ambiguousCard));
  $("ambiguous-empty").hidden = reply.operations.length > 0;
}

async function refreshAmbiguousCount() {
  try {
    const reply = await api("/api/ambiguous?page_size=100");
    const count = $("ambiguous-count");
    const n = reply.operations.length;
    count.textContent = reply.next_page_token ? `${n}+` : String(n);
    count.hidden = n === 0;
  } catch (_) {
    // the count is a hint; the view itself reports failures
  }
}

// --- runners -------------------------------------------------------------------

function capacity(used, total) {
  const shown = total ? `${used} / ${total}` : `${used} / ?`;
  const meter = el("meter", { min: 0, max: total || 1, value: Math.min(used, total || 1) });
  return el("span", { class: "capacity" }, meter, " ", shown);
}

function drainControl(runner) {
  if (runner.drained) {
    return el("span", {},
      el("span", { class: "badge drained" }, "DRAINED"),
      ` by ${runner.drained_by}: ${runner.drain_reason} `,
      el("button", { type: "button", class: "secondary", onclick: () => drain(runner.name, null) }, "Undrain"));
  }
  const form = el("form", { class: "drain-form" },
    el("input", { name: "reason", placeholder: "why drain?", required: true, maxlength: 2000 }),
    el("button", { type: "submit", class: "secondary" }, "Drain"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    drain(runner.name, form.elements.reason.value.trim());
  });
  return form;
}

async function drain(name, reason) {
  // reason null: undrain
  const action = reason === null ? "undrain" : "drain";
  try {
    await api(`/api/runners/${encodeURIComponent(name)}/${action}`, { body: reason === null ? {} : { reason } });
    await showRunners();
    flash(`${name}: ${action === "drain" ? "drained: no new turns go to it" : "undrained"}`);
  } catch (failure) {
    flash(describe(failure), true);
  }
}

async function showRunners() {
  $("view-runners").hidden = false;
  const reply = await api("/api/runners");
  $("runners-body").replaceChildren(
    ...reply.runners.map((runner) =>
      el(
        "tr",
        { "data-runner": runner.name },
        el("td", {}, el("b", {}, runner.name)),
        el("td", {}, el("code", {}, runner.address)),
        el("td", {}, (runner.pools || []).join(", ")),
        // What its GetRunnerInfo said it serves (PROTOCOL C6b); "-" until it answers.
        el("td", { "data-testid": "executors" }, (runner.executors || []).join(", ") || "-"),
        el("td", {}, el("code", {}, clip(runner.incarnation_id, 12))),
        el("td", {}, el("code", {}, clip(runner.store_id, 12))),
        el("td", { "data-testid": "writable" }, capacity(runner.writable_in_use, runner.writable_slots)),
        el("td", { "data-testid": "read-only" }, capacity(runner.read_only_in_use, runner.read_only_slots)),
        el("td", {}, badge("health", runner.answering ? "ANSWERING" : "SILENT"), " ",
          el("span", { class: "note" }, runner.answering && runner.health === "answering" ? "" : runner.health)),
        el("td", {}, drainControl(runner)),
      ),
    ),
  );
  $("runners-empty").hidden = reply.runners.length > 0;
}

function go(hash) {
  // The same fragment again fires no hashchange: reload the view then.
  if (location.hash === hash) route();
  else location.hash = hash;
}

// --- wiring ------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    startSession();
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = filtersFromForm().toString();
    go(`#/operations${query ? `?${query}` : ""}`);
  });
  $("filters-clear").addEventListener("click", () => go("#/operations"));
  $("operations-more").addEventListener("click", () => loadOperations(parseHash().params, true)
    .catch((failure) => flash(describe(failure), true)));
  $("ambiguous-decided").addEventListener("change", () => route());
  window.addEventListener("hashchange", () => route());
  if (sessionStorage.getItem(TOKEN_KEY)) startSession();
  else showLogin("");
});
