// Drives the console in Debian's headless Chromium (playwright-core, no browser
// download) the way an operator would, and prints what the page showed as one
// JSON line on stdout for tests/console/test_console_browser.py to check.
//
//   node tests/console/console_check.mjs   (all input from the environment)
//
// CONSOLE_URL      the console's URL (http://127.0.0.1:PORT/)
// ADMIN_TOKEN      a token with the admin scope
// AMBIGUOUS_ID     an operation that ended with execution UNKNOWN, no verdict yet
// SCREENSHOTS      a directory for the PNGs (list.png, operation.png, ...)
// USER_DATA_DIR    a fresh, empty directory for the browser profile
// CHROMIUM         the browser (default /usr/bin/chromium)
// ALL_SCREENSHOTS  1: a PNG of every view (docs); else only verdict.png (the
//                  timeline with the recorded verdict), each screenshot ~1 s
//
// Every wait is bounded (STEP_MS); a step that fails exits 1 with the step's
// name, the page's URL and whatever the page logged.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const STEP_MS = 10_000;
const VIEWPORT = { width: 1280, height: 860 };
const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === "") {
    console.error(`console_check: set ${name}`);
    process.exit(2);
  }
  return value;
};
const url = env("CONSOLE_URL");
const token = env("ADMIN_TOKEN");
const ambiguousId = env("AMBIGUOUS_ID");
const shots = env("SCREENSHOTS");
const userDataDir = env("USER_DATA_DIR");
const executablePath = env("CHROMIUM", "/usr/bin/chromium");
const allShots = process.env.ALL_SCREENSHOTS === "1";
mkdirSync(shots, { recursive: true });

const facts = { console_errors: [], screenshots: {}, step_ms: {} };
const started = Date.now();
let step = "launch";
let stepStarted = started;
function next(name) {
  facts.step_ms[step] = Date.now() - stepStarted;
  step = name;
  stepStarted = Date.now();
}

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  chromiumSandbox: false, // --no-sandbox: CI runs as root
  viewport: VIEWPORT,
  args: [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
  timeout: 30_000,
});

async function shot(page, name, always = false) {
  if (!always && !allShots) return;
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: false });
  facts.screenshots[name] = path;
}

const texts = (page, selector) =>
  page.locator(selector).evaluateAll((nodes) => nodes.map((n) => n.textContent.trim()));

try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_MS);
  page.on("console", (message) => {
    if (message.type() === "error") facts.console_errors.push(message.text());
  });
  page.on("pageerror", (error) => facts.console_errors.push(String(error)));

  next("open the page: the sign-in form shows");
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await page.locator("#login").waitFor({ state: "visible" });
  facts.login_shown = true;

  next("a wrong token is refused on the page");
  await page.fill("#token", "not-a-token");
  await page.click("#login-form button[type=submit]");
  await page.locator("#login-error").waitFor({ state: "visible" });
  facts.wrong_token_error = (await page.textContent("#login-error")).trim();
  facts.errors_before_sign_in = facts.console_errors.splice(0); // the refused token's 401

  next("sign in with the admin token");
  await page.fill("#token", token);
  await page.click("#login-form button[type=submit]");
  await page.locator("#principal").filter({ hasText: /\S/ }).waitFor();
  facts.principal = (await page.textContent("#principal")).trim();
  facts.token_in_url = page.url().includes(token);

  next("the operations list");
  await page.locator("#operations-body tr").first().waitFor();
  facts.all_operation_ids = await page
    .locator("#operations-body tr")
    .evaluateAll((rows) => rows.map((r) => r.dataset.operation));
  facts.all_states = await texts(page, "#operations-body [data-testid=state]");
  await shot(page, "operations");

  next("filter the list by state TIMED_OUT");
  await page.check("#state-boxes input[value=TIMED_OUT]");
  await page.click("#filters button[type=submit]");
  await page.waitForFunction(() => location.hash.includes("state=TIMED_OUT"));
  await page.waitForFunction(
    () =>
      document.body.dataset.ready === "operations" &&
      [...document.querySelectorAll("#operations-body [data-testid=state]")].every(
        (b) => b.textContent.trim() === "TIMED_OUT",
      ),
  );
  facts.filtered_hash = await page.evaluate(() => location.hash);
  facts.filtered_states = await texts(page, "#operations-body [data-testid=state]");
  facts.filtered_ids = await page
    .locator("#operations-body tr")
    .evaluateAll((rows) => rows.map((r) => r.dataset.operation));

  next("open the ambiguous operation's timeline");
  await page.click(`#operations-body tr[data-operation="${ambiguousId}"] a`);
  await page.locator("#view-operation").waitFor({ state: "visible" });
  await page.locator("#op-timeline li").first().waitFor();
  facts.timeline = {
    id: (await page.textContent("#op-id")).trim(),
    state: (await page.textContent("#op-badges [data-testid=state]")).trim(),
    execution: (await page.textContent("#op-badges [data-testid=execution]")).trim(),
    principal: (await page.textContent("[data-testid=op-principal]")).trim(),
    events: await texts(page, "#op-timeline li"),
    attempts: await page.locator("#op-attempts tbody tr").count(),
    attempt_outcomes: await texts(page, "#op-attempts [data-testid=outcome]"),
    verdict_form: await page.locator("#op-actions form.verdict-form").count(),
  };
  await shot(page, "operation");

  next("the runners with their capacity");
  await page.click("#nav a[data-view=runners]");
  await page.locator("#runners-body tr").first().waitFor();
  facts.runners = await page.locator("#runners-body tr").evaluateAll((rows) =>
    rows.map((r) => ({
      name: r.dataset.runner,
      writable: r.querySelector("[data-testid=writable]").textContent.trim(),
      read_only: r.querySelector("[data-testid=read-only]").textContent.trim(),
      executors: r.querySelector("[data-testid=executors]").textContent.trim(),
      health: r.querySelector("[data-testid=health]").textContent.trim(),
    })),
  );
  await shot(page, "runners");

  next("the ambiguous queue: record a verdict");
  await page.click("#nav a[data-view=ambiguous]");
  const card = page.locator(`#ambiguous-list article[data-operation="${ambiguousId}"]`);
  await card.waitFor();
  facts.ambiguous_ids = await page
    .locator("#ambiguous-list article")
    .evaluateAll((cards) => cards.map((c) => c.dataset.operation));
  facts.ambiguous_card_attempts = await card.locator("tbody tr").count();
  await shot(page, "ambiguous");
  await card.locator("input[value=NOT_EXECUTED]").check();
  await card.locator("textarea[name=reason]").fill("runner log shows no start for this turn");
  await card.locator("button[type=submit]").click();
  await card.locator(".form-result.ok").waitFor();
  facts.verdict_result = (await card.locator(".form-result").textContent()).trim();

  next("the verdict shows on the operation");
  await page.goto(`${url}#/operations/${ambiguousId}`);
  await page.locator("[data-testid=verdict]").waitFor();
  facts.verdict_shown = (await page.textContent("[data-testid=verdict]")).trim();
  facts.verdict_form_after = await page.locator("#op-actions form.verdict-form").count();
  await shot(page, "verdict", true);

  next("sign out forgets the token");
  await page.click("#sign-out");
  await page.locator("#login").waitFor({ state: "visible" });
  facts.token_after_sign_out = await page.evaluate(() =>
    sessionStorage.getItem("turnwire.console.token"),
  );
  next("done");
  facts.ok = true;
} catch (error) {
  facts.ok = false;
  facts.failed_step = step;
  facts.error = String(error).split("\n").slice(0, 4).join(" ");
  const page = context.pages()[0];
  if (page) {
    facts.failed_url = page.url();
    try {
      await shot(page, "failure", true);
    } catch (_) {
      // the screenshot of a broken page is a best effort
    }
  }
} finally {
  await context.close();
  facts.total_ms = Date.now() - started;
}
process.stdout.write(`${JSON.stringify(facts)}\n`);
process.exit(facts.ok ? 0 : 1);
