// The Pawl operator console: configs, releases, a rollout followed live
// from the server's watch stream, instances a page at a time, and the
// Promote, Rollback and Stop actions, authorized by the server exactly as
// the CLI's calls are (a bearer token in the Authorization header).

import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { KVService } from "../../gen/ts/pawl/v1/kv_pb.js";
import { InstanceService } from "../../gen/ts/pawl/v1/instance_pb.js";
import { ReleaseService, ReleaseState, type Release } from "../../gen/ts/pawl/v1/release_pb.js";
import {
  InstanceState, PromotionUnknownSchema, RejectCode, RolloutService,
  type Ack, type GetRolloutStatusResponse, type Receipt,
} from "../../gen/ts/pawl/v1/rollout_pb.js";
import { fill, h, short, table } from "./dom.js";

const TOKEN_KEY = "pawl.console.token";
const PAGE_SIZE = 50;
// Pawl's own records, read through KV (the server requires role admin for
// them when it has an auth file).
const SYSTEM = "/_pawl/";

const withToken: Interceptor = (next) => async (req) => {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) req.header.set("Authorization", "Bearer " + token);
  return next(req);
};
const transport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [withToken] });
const kv = createClient(KVService, transport);
const instances = createClient(InstanceService, transport);
const releases = createClient(ReleaseService, transport);
const rollouts: Client<typeof RolloutService> = createClient(RolloutService, transport);

const $ = (id: string) => document.getElementById(id) as HTMLElement;
const when = (t?: Timestamp) => (t ? timestampDate(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "—");
const stateName = (s: InstanceState) => InstanceState[s] ?? String(s);
const releaseStateName = (s: ReleaseState) => ReleaseState[s] ?? String(s);

/** Describes an error for the operator: its Connect code and message. */
function describe(err: unknown): string {
  const e = ConnectError.from(err);
  return `${Code[e.code] ?? e.code}: ${e.rawMessage}`;
}

function flash(text: string, kind: "ok" | "error" | "unknown" = "error"): void {
  fill($("flash"), text ? h("div.flash." + kind, { role: "status" }, text) : null);
}

// ---- Routing: #config=C&gen=G ----

interface Route { config: string; gen: bigint }

function route(): Route {
  const p = new URLSearchParams(location.hash.slice(1));
  const g = p.get("gen");
  return { config: p.get("config") ?? "", gen: g && /^\d+$/.test(g) ? BigInt(g) : 0n };
}

function go(config: string, gen?: bigint): void {
  const p = new URLSearchParams({ config });
  if (gen) p.set("gen", String(gen));
  location.hash = p.toString();
}

// ---- Token ----

function renderToken(): void {
  const input = h("input", { id: "token", type: "password", placeholder: "bearer token", autocomplete: "off" }) as HTMLInputElement;
  input.value = sessionStorage.getItem(TOKEN_KEY) ?? "";
  const save = () => {
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
    else sessionStorage.removeItem(TOKEN_KEY);
    flash(input.value ? "Token saved for this tab." : "Token cleared.", "ok");
    void render();
  };
  fill($("auth"), input, h("button", { id: "token-save", onclick: save }, "Use token"));
}

// ---- Configs ----

async function renderConfigs(current: string): Promise<void> {
  const el = $("configs");
  try {
    const ids: string[] = [];
    let pageToken = "";
    do { // the index holds one key per config
      const res = await kv.list({ prefix: SYSTEM + "index/configs/", pageSize: 1000, pageToken });
      for (const k of res.kvs) ids.push(k.key.slice((SYSTEM + "index/configs/").length));
      pageToken = res.nextPageToken;
    } while (pageToken && ids.length < 5000);
    fill(el, h("h2", null, "Configs"), ids.length === 0 ? h("p.muted", null, "No config has a release yet.") :
      h("ul.configs", null, ids.map((id) => h("li", null,
        h("a", { href: "#" + new URLSearchParams({ config: id }).toString(), class: id === current ? "current" : "" }, id)))));
  } catch (err) {
    fill(el, h("h2", null, "Configs"), h("p.error", null, "Cannot list configs: " + describe(err)));
  }
}

// ---- One config: pointer, pointer history (receipts), releases ----

async function renderConfig(config: string, gen: bigint): Promise<bigint> {
  const el = $("config");
  const [ptr, rels, receipts] = await Promise.all([
    rollouts.getPointer({ configId: config }),
    releases.listReleases({ configId: config, pageSize: 1000 }),
    listReceipts(config),
  ]);
  const pointer = ptr.pointer;
  const list = rels.releases;
  if (!gen) { // the newest candidate, else the active generation
    gen = [...list].reverse().find((r) => r.state === ReleaseState.CANDIDATE)?.generation ?? pointer?.generation ?? 0n;
  }
  fill(el,
    h("h2", null, config),
    h("p", { id: "pointer" }, "Active generation ", h("strong", { id: "active-gen" }, String(pointer?.generation ?? 0n)),
      ", epoch ", String(pointer?.epoch ?? 0n), pointer?.receiptKey ? [", receipt ", h("code", null, pointer.receiptKey)] : ""),
    h("h3", null, "Releases"),
    table("releases", ["Gen", "State", "Content digest", "Validator digest", "Members", "Created", "By"],
      list.map((r: Release) => [
        h("a", { href: "#" + new URLSearchParams({ config, gen: String(r.generation) }).toString(), class: r.generation === gen ? "current" : "" }, String(r.generation)),
        h("span.state.s-" + releaseStateName(r.state).toLowerCase(), null, releaseStateName(r.state)),
        short(r.contentDigest), short(r.spec?.validatorDigest ?? ""), r.memberCount, when(r.createdAt), r.createdBy,
      ])),
    h("h3", null, "Pointer history"),
    receipts.length === 0 ? h("p.muted", null, "Never promoted.") :
      table("receipts", ["Revision", "Move", "Epoch", "Actor", "Time", "Key", "Request"],
        receipts.map((r) => [r.revision, `${r.rollback ? "rollback" : "promote"} ${r.from_generation} → ${r.to_generation}`,
          r.epoch, r.principal || r.actor, r.time.replace("T", " ").replace(/\.\d+Z$/, "Z"), h("code", null, r.idempotency_key), h("code", null, r.request_id ?? "")])),
  );
  return gen;
}

interface StoredReceipt {
  revision: number; from_generation: number; to_generation: number; epoch: number; rollback: boolean;
  actor: string; principal?: string; time: string; idempotency_key: string; request_id?: string; fenced_at?: string;
}

/** The config's receipts, newest first (fences of lookups left out). */
async function listReceipts(config: string): Promise<StoredReceipt[]> {
  const out: StoredReceipt[] = [];
  let pageToken = "";
  const dec = new TextDecoder();
  do {
    const res = await kv.list({ prefix: `${SYSTEM}configs/${config}/receipts/`, pageSize: 1000, pageToken });
    for (const k of res.kvs) {
      const r = JSON.parse(dec.decode(k.value)) as StoredReceipt;
      if (!r.fenced_at) out.push({ ...r, revision: Number(k.modRevision) });
    }
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out.sort((a, b) => b.revision - a.revision);
}

// ---- A rollout, live ----

let live: AbortController | null = null;
let liveKey = "";
let refreshTimer = 0;
let lastRejected = -1;
let statusInFlight = false;
let statusAgain = false;

/** Follows the release's records (pointer, progress, stop) and its ACKs with two watch streams; each change refreshes the status. */
function follow(config: string, gen: bigint): void {
  const key = `${config}@${gen}`;
  if (liveKey === key && live) return;
  live?.abort();
  live = new AbortController();
  liveKey = key;
  lastRejected = -1;
  const signal = live.signal;
  const genKey = String(gen).padStart(20, "0");
  for (const prefix of [`${SYSTEM}configs/${config}/`, `${SYSTEM}acks/${config}/${genKey}/`]) void watch(prefix, signal);
}

async function watch(prefix: string, signal: AbortSignal): Promise<void> {
  let backoff = 500;
  while (!signal.aborted) {
    try {
      for await (const res of kv.watch({ prefix }, { signal })) {
        backoff = 500;
        setLive(true);
        if (res.kind.case === "started" || res.kind.case === "events" || res.kind.case === "compacted") scheduleRefresh();
      }
    } catch (err) {
      if (signal.aborted) return;
      setLive(false, describe(err));
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

function setLive(ok: boolean, why = ""): void {
  fill($("live"), h("span.live." + (ok ? "on" : "off"), { title: why }, ok ? "● live" : "○ reconnecting"));
}

/** Refreshes the status at most every 250 ms however fast ACKs arrive. */
function scheduleRefresh(): void {
  if (refreshTimer) return;
  refreshTimer = window.setTimeout(() => { refreshTimer = 0; void refreshStatus(); }, 250);
}

async function refreshStatus(): Promise<void> {
  if (statusInFlight) { statusAgain = true; return; }
  statusInFlight = true;
  try {
    const { config, gen } = current;
    if (!config || !gen) return;
    const st = await rollouts.getRolloutStatus({ configId: config, generation: gen, ackPageSize: 1 });
    renderRollout(config, gen, st);
    const rejected = st.stages.reduce((n, s) => n + s.rejected, 0);
    if (rejected !== lastRejected) { lastRejected = rejected; void renderRejected(config, gen); }
    const active = document.getElementById("active-gen");
    if (active && st.pointer && active.textContent !== String(st.pointer.generation)) void renderConfig(config, gen);
  } catch (err) {
    fill($("rollout"), h("p.error", null, "Cannot read the rollout: " + describe(err)));
  } finally {
    statusInFlight = false;
    if (statusAgain) { statusAgain = false; scheduleRefresh(); }
  }
}

function counts(states: Record<string, number>): HTMLElement {
  const order = ["NO_ACK", "DISCOVERED", "DOWNLOADED", "VALIDATED", "STAGED", "APPLIED", "HEALTHY_ACKED", "UNHEALTHY", "REJECTED", "STALE"];
  const keys = Object.keys(states).sort((a, b) => (order.indexOf(a) + 99 * +(order.indexOf(a) < 0)) - (order.indexOf(b) + 99 * +(order.indexOf(b) < 0)));
  return h("span.counts", null, keys.filter((k) => states[k]).map((k) => h("span.count.c-" + k.toLowerCase(), { title: k }, `${k} ${states[k]}`)));
}

function bar(healthy: number, rejected: number, members: number): HTMLElement {
  const pct = (n: number) => (members ? (100 * n) / members : 0).toFixed(1) + "%";
  // Widths set through the CSSOM: the CSP refuses style attributes.
  const ok = h("div.healthy");
  ok.style.width = pct(healthy);
  const bad = h("div.rejected");
  bad.style.width = pct(rejected);
  return h("div.bar", { title: `${healthy} healthy, ${rejected} rejected of ${members}` }, ok, bad);
}

function renderRollout(config: string, gen: bigint, st: GetRolloutStatusResponse): void {
  const cov = st.coverage;
  const ptr = st.pointer;
  const candidate = st.state === ReleaseState.CANDIDATE;
  const reason = h("input", { id: "stop-reason", placeholder: "why stop (required)" }) as HTMLInputElement;
  fill($("rollout"),
    h("h2", null, `Rollout of ${config} generation ${gen} `, h("span.state.s-" + releaseStateName(st.state).toLowerCase(), { id: "release-state" }, releaseStateName(st.state))),
    h("div.actions", null,
      h("button", { id: "promote", disabled: !candidate, onclick: () => void move("promote", config, gen) }, `Promote ${gen}`),
      h("button", { id: "rollback", disabled: !ptr || ptr.generation === 0n, onclick: () => void move("rollback", config, gen) }, "Roll back"),
      reason,
      h("button.danger", { id: "stop", disabled: !candidate, onclick: () => void stop(config, gen, reason.value) }, "Stop"),
    ),
    st.stop ? h("p.error", { id: "stopped" }, `Stopped${st.stop.stage ? " at stage " + st.stop.stage : " by " + st.stop.actor}: ${st.stop.reason}`) : null,
    cov ? h("p", { id: "coverage" }, h("strong", null, "Coverage: "), cov.summary || `${cov.reported} of ${cov.members} reported`,
      ` — ${cov.onRelease} on this release, ${cov.mismatched} with another digest, ${cov.required} required to promote`,
      cov.missingCount ? h("span.muted", null, ` (${cov.missingCount} missing, e.g. ${cov.missing.slice(0, 5).join(", ")})`) : null) : null,
    table("stages", ["Stage", "Outcome", "Progress", "Members", "Healthy", "Rejected", "States", "Zones", "Roles"],
      st.stages.map((s) => [
        h("span", null, s.name, s.shadow ? h("span.muted", null, " (shadow)") : null, s.reached ? null : h("span.muted", null, " (not reached)")),
        h("span.outcome.o-" + s.outcome, { title: s.reason }, s.outcome), bar(s.healthy, s.rejected, s.members),
        s.members, h("span.healthy-count", null, String(s.healthy)), s.rejected, counts(s.states),
        h("div.zones", null, Object.entries(s.zones).sort(([a], [b]) => a.localeCompare(b)).map(([z, zs]) =>
          h("div.zone", null, h("span.zone-name", null, z), ` ${zs.healthy}/${zs.members} `, counts(zs.states)))),
        h("div.roles", null, Object.entries(s.roles).sort(([a], [b]) => a.localeCompare(b)).map(([r, rs]) =>
          h("div.role", null, h("span.role-name", null, r || "(no role)"), ` ${rs.members} `, counts(rs.states)))),
      ])),
    h("p.muted", null, `Membership generation ${st.membershipGeneration}; ${st.retirements.length} retired. Counts per stage, zone, role and state are aggregated by the server.`),
  );
}

const REJECT_SCAN_PAGES = 20;

/** Lists the instances whose latest ACK rejects the release, with their reasons (from the ACK pages; bounded). */
async function renderRejected(config: string, gen: bigint): Promise<void> {
  const latest = new Map<string, Ack>();
  let ackPageToken = "";
  let pages = 0;
  let scanned = 0;
  try {
    do {
      const st = await rollouts.getRolloutStatus({ configId: config, generation: gen, ackPageSize: 1000, ackPageToken });
      for (const a of st.acks) { latest.set(a.workloadIdentity, a); scanned++; }
      ackPageToken = st.nextAckPageToken;
    } while (ackPageToken && ++pages < REJECT_SCAN_PAGES);
  } catch (err) {
    fill($("rejected"), h("p.error", null, "Cannot read the ACKs: " + describe(err)));
    return;
  }
  const rejected = [...latest.values()].filter((a) => a.state === InstanceState.REJECTED);
  fill($("rejected"), h("h3", null, `Rejected instances (${rejected.length})`),
    ackPageToken ? h("p.muted", null, `Scanned the first ${scanned} ACKs only.`) : null,
    rejected.length === 0 ? h("p.muted", null, "None.") :
      table("rejected", ["Instance", "Code", "Reason", "Violations", "Counted", "Trace"], rejected.slice(0, 200).map((a) => [
        a.workloadIdentity, RejectCode[a.rejectCode] ?? "", h("span.reason", null, a.reason),
        a.violations.map((v) => h("div", null, `${v.path}: ${v.message}`)), a.counted ? "yes" : a.notCountedReason, h("code", null, a.traceId)])));
}

// ---- Promote, Rollback, Stop ----

function idempotencyKey(): string {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return "console-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Whether a failed move may still have happened: the answer was lost, as the CLI judges it, or the server said it cannot tell. */
function unknownOutcome(e: ConnectError): boolean {
  return e.findDetails(PromotionUnknownSchema).length > 0 ||
    [Code.Unavailable, Code.DeadlineExceeded, Code.Unknown, Code.Canceled].includes(e.code);
}

async function move(kind: "promote" | "rollback", config: string, gen: bigint): Promise<void> {
  const key = idempotencyKey();
  try {
    const { pointer } = await rollouts.getPointer({ configId: config });
    const expected = { expectedGeneration: pointer?.generation ?? 0n, expectedEpoch: pointer?.epoch ?? 0n, idempotencyKey: key };
    const res = kind === "promote"
      ? await rollouts.promote({ configId: config, generation: gen, ...expected })
      : await rollouts.rollback({ configId: config, ...expected });
    moved(res.receipt);
  } catch (err) {
    const e = ConnectError.from(err);
    if (!unknownOutcome(e)) { flash(`${kind} refused: ${describe(e)}`); return; }
    await resolveUnknown(config, key, describe(e));
  }
  scheduleRefresh();
  void renderConfig(config, gen);
}

function moved(rc?: Receipt): void {
  if (!rc) return;
  flash(`${rc.rollback ? "Rolled back" : "Promoted"}: generation ${rc.fromGeneration} → ${rc.toGeneration}, epoch ${rc.epoch}, receipt ${rc.idempotencyKey} by ${rc.actor}`, "ok");
}

/** PROMOTION_UNKNOWN: looks the receipt up under the move's key (GetPromotion), as `pawl promote` does. */
async function resolveUnknown(config: string, key: string, why: string): Promise<void> {
  try {
    const got = await rollouts.getPromotion({ configId: config, idempotencyKey: key });
    moved(got.receipt);
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.NotFound) {
      flash(`PROMOTION_UNKNOWN resolved: the move did not happen (no receipt under key ${key}, and the lookup fenced the key so it never will). Try again.`, "error");
      return;
    }
    fill($("flash"), h("div.flash.unknown", { role: "status" },
      `PROMOTION_UNKNOWN: ${why}. Whether the move happened is unknown (receipt lookup: ${describe(e)}). `,
      h("button", { id: "check-again", onclick: () => void resolveUnknown(config, key, why) }, "Check again"),
      ` or run: pawl promotion ${config} ${key}`));
  }
}

async function stop(config: string, gen: bigint, reason: string): Promise<void> {
  if (!reason.trim()) { flash("Stop needs a reason (it goes to the audit trail)."); return; }
  try {
    const res = await rollouts.stopRollout({ configId: config, generation: gen, reason });
    flash(`Stopped generation ${gen}: ${res.stop?.reason}`, "ok");
  } catch (err) {
    flash("Stop refused: " + describe(err));
  }
  scheduleRefresh();
  void renderConfig(config, gen);
}

// ---- Instances, a page at a time ----

/** A paginated table: page tokens kept as a stack so Previous works. */
class Pager {
  private tokens: string[] = [""];
  constructor(readonly el: HTMLElement, private id: string, private load: (token: string) => Promise<{ rows: HTMLElement; next: string; summary: string }>) {}
  reset(): void { this.tokens = [""]; void this.show(); }
  async show(): Promise<void> {
    const token = this.tokens[this.tokens.length - 1]!;
    try {
      const { rows, next, summary } = await this.load(token);
      const page = this.tokens.length;
      fill(this.el, rows, h("div.pager", null,
        h("button", { id: this.id + "-prev", disabled: page === 1, onclick: () => { this.tokens.pop(); void this.show(); } }, "← Previous"),
        h("span", { id: this.id + "-page" }, ` page ${page} ${summary} `),
        h("button", { id: this.id + "-next", disabled: !next, onclick: () => { this.tokens.push(next); void this.show(); } }, "Next →")));
    } catch (err) {
      fill(this.el, h("p.error", null, describe(err)));
    }
  }
}

const registry = new Pager(document.createElement("div"), "instances", async (pageToken) => {
  const res = await instances.listInstances({ pageSize: PAGE_SIZE, pageToken });
  return {
    next: res.nextPageToken, summary: `(${res.instances.length} shown, ${PAGE_SIZE} per page)`,
    rows: table("instances", ["Instance", "Zone", "Role", "Version", "Boot", "Live", "Registered", "By"], res.instances.map((r) => [
      r.instance?.workloadIdentity, r.instance?.zone, r.instance?.role, r.instance?.appVersion, h("code", null, r.instance?.bootId ?? ""),
      r.live ? "live" : h("span.muted", null, "expired"), when(r.registeredAt), r.registeredBy])),
  };
});

let appliedConfig = "";
const applied = new Pager(document.createElement("div"), "applied", async (pageToken) => {
  const res = await rollouts.listApplied({ configId: appliedConfig, pageSize: PAGE_SIZE, pageToken });
  return {
    next: res.nextPageToken, summary: `(${res.applied.length} shown, ${PAGE_SIZE} per page)`,
    rows: table("applied", ["Instance", "State", "Gen", "Applied digest", "Matches", "Boot", "Current boot", "Reported", "Trace ID"], res.applied.map((a) => [
      a.workloadIdentity, stateName(a.state), String(a.generation), short(a.contentDigest), a.matchesRelease ? "yes" : h("span.error", null, "no"),
      h("code", null, a.bootId), a.currentBoot ? "yes" : "no", when(a.reportedAt), h("code.trace", null, a.traceId || "—")])),
  };
});

// ---- Page ----

let current: Route = { config: "", gen: 0n };

async function render(): Promise<void> {
  current = route();
  const { config } = current;
  void renderConfigs(config);
  fill($("instances"), h("h2", null, "Registered instances"), registryEl);
  registry.reset();
  if (!config) {
    fill($("config"), h("p.muted", null, "Choose a config."));
    fill($("rollout"));
    fill($("rejected"));
    fill($("applied"));
    live?.abort(); live = null; liveKey = "";
    return;
  }
  try {
    current.gen = await renderConfig(config, current.gen);
  } catch (err) {
    fill($("config"), h("p.error", null, `Cannot read config ${config}: ${describe(err)}`));
    return;
  }
  appliedConfig = config;
  fill($("applied"), h("h2", null, `What instances run of ${config}`), appliedEl);
  applied.reset();
  if (current.gen) {
    follow(config, current.gen);
    await refreshStatus();
  } else {
    fill($("rollout"), h("p.muted", null, "No release."));
  }
}

const registryEl = registry.el;
const appliedEl = applied.el;

renderToken();
window.addEventListener("hashchange", () => { void render(); });
void render();
// Exposed for the end-to-end test and for people at the browser console.
Object.assign(window, { pawlConsole: { go } });
