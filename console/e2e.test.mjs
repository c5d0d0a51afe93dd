// End-to-end test of the console in a real headless Chromium (Debian's,
// driven by playwright-core; no browser is downloaded). Run by
// server/internal/console's TestConsoleInChromium, which starts pawld,
// seeds it and answers this script's requests on stdin:
//
//   PAWL_URL      the server's base URL
//   PAWL_TOKEN    the operator's bearer token, entered in the page
//   PAWL_CONFIG   the config to open; its generation 1 is rolling out
//   SCREENSHOT    where to save a screenshot
//
// It prints "ACK?" when the page shows the rollout and waits for a line on
// stdin: the test then sends one more healthy ACK, and the page must show
// it without a reload.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const { PAWL_URL, PAWL_TOKEN, PAWL_CONFIG, SCREENSHOT } = process.env;
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const step = (s) => console.error(`e2e: ${s}`);
function check(ok, what) {
  if (!ok) throw new Error(what);
}

const profile = mkdtempSync(join(tmpdir(), "pawl-console-e2e-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
  viewport: { width: 1400, height: 1100 },
});
try {
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(15_000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // Console errors (a CSP violation, an exception) fail the test; refused
  // calls are expected before the token is entered, and are checked by
  // what the page shows.
  page.on("console", (m) => { if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text()); });
  page.on("response", (r) => {
    if (r.status() >= 400 && r.status() !== 401 && !r.url().endsWith("/favicon.ico")) errors.push(`${r.status()} ${r.url()}`);
  });

  await page.goto(`${PAWL_URL}/ui/#config=${PAWL_CONFIG}`);
  step("without a token the server refuses, and the page says so");
  await page.locator("#config .error").waitFor();
  check(/Unauthenticated|PermissionDenied/.test(await page.locator("#config").innerText()), "no token: no refusal shown");

  await page.fill("#token", PAWL_TOKEN);
  await page.click("#token-save");
  step("the rollout shows, stage by stage");
  await page.locator("table.stages tbody tr").nth(1).waitFor();
  const fleetHealthy = page.locator("table.stages tbody tr").nth(1).locator(".healthy-count");
  const before = Number(await fleetHealthy.innerText());
  check(before > 0, `fleet stage healthy = ${before}`);
  const roleRows = await page.locator("table.stages tbody tr").nth(1).locator(".role-name").allInnerTexts();
  check(roleRows.length === 2, `fleet stage roles = ${JSON.stringify(roleRows)}; want the two roles the instances registered with`);
  check(await page.locator("#release-state").innerText() === "CANDIDATE", "release is not a candidate");
  check(await page.locator("#active-gen").innerText() === "0", "active generation is not 0");
  await page.evaluate(() => { window.__notReloaded = true; });

  step("an ACK arrives: the page shows it live");
  console.log("ACK?");
  await lines.next();
  await page.waitForFunction((n) => Number(document.querySelector("table.stages tbody tr:nth-child(2) .healthy-count")?.textContent) === n, before + 1);
  check(await page.evaluate(() => window.__notReloaded === true), "the page reloaded");

  step("the rejected instance shows with its reason");
  await page.locator("table.rejected").getByText("upstream b refused the weights").waitFor();

  step("the instance list paginates");
  const first = await page.locator("table.instances tbody tr").first().innerText();
  check(await page.locator("table.instances tbody tr").count() === 50, "page 1 is not 50 rows");
  await page.click("#instances-next");
  await page.locator("#instances-page", { hasText: "page 2" }).waitFor();
  check(await page.locator("table.instances tbody tr").first().innerText() !== first, "page 2 shows page 1's rows");
  check(await page.locator("table.instances tbody tr").count() === 50, "page 2 is not 50 rows");
  await page.click("#instances-prev");
  await page.locator("#instances-page", { hasText: "page 1" }).waitFor();
  await page.locator("table.applied tbody tr").first().waitFor();

  step("Promote moves the pointer");
  await page.click("#promote");
  await page.locator(".flash.ok", { hasText: "Promoted: generation 0 → 1" }).waitFor();
  await page.locator("#active-gen", { hasText: "1" }).waitFor();
  await page.locator("#release-state", { hasText: "ACTIVE" }).waitFor();
  await page.locator("table.receipts tbody tr").first().waitFor();
  check(await page.evaluate(() => window.__notReloaded === true), "the page reloaded");
  if (SCREENSHOT) await page.screenshot({ path: SCREENSHOT });
  check(errors.length === 0, `page errors: ${errors.join("; ")}`);
  console.log("OK");
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
  process.stdin.destroy();
}
