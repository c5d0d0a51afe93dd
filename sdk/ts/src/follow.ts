// A client that follows an instance's assignments as the Go SDK does
// (sdk/follow.go, sdk/apply.go, sdk/ack.go): it registers the instance,
// watches its assignments, downloads each assigned release, verifies its
// content against the assignment's content digest, hands it to the
// application, and reports each step to RolloutService.Ack with a W3C
// traceparent.

import { create } from "@bufbuild/protobuf";
import { durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";

import { InstanceService, InstanceSchema, type Assignment } from "../../../gen/ts/pawl/v1/instance_pb.js";
import { ReleaseService, type Release } from "../../../gen/ts/pawl/v1/release_pb.js";
import { AckSchema, InstanceState, RejectCode, RolloutService, type Ack } from "../../../gen/ts/pawl/v1/rollout_pb.js";
import { contentDigest } from "./canonical.js";
import { childTraceparent, newTraceId, traceIdOf } from "./traceparent.js";

/** Snapshot is a release the application was given to apply. */
export interface Snapshot {
  config: string;
  generation: bigint;
  epoch: bigint;
  /** The rollout stage that assigned it ("" once promoted). */
  stage: string;
  contentDigest: string;
  validatorDigest: string;
  mediaType: string;
  content: Uint8Array;
}

/** FollowEvent is something the follower did, for logs and tests. */
export type FollowEvent =
  | { kind: "registered"; epoch: bigint }
  | { kind: "acked"; ack: Ack }
  | { kind: "applied"; snapshot: Snapshot }
  | { kind: "rejected"; config: string; generation: bigint; code: RejectCode; reason: string }
  | { kind: "error"; what: string; error: ConnectError };

/** FollowOptions describe the instance and what the application does. */
export interface FollowOptions {
  /** The instance's workload identity (required). */
  workloadIdentity: string;
  zone?: string;
  role?: string;
  labels?: Record<string, string>;
  appVersion?: string;
  appArtifact?: string;
  trafficWeight?: number;
  /** Follow only these configs (default: every config assigned). */
  configs?: string[];
  /**
   * Applies a verified release; a throw rejects it (APPLY_FAILED). The
   * signal aborts when a newer assignment replaces it or the follower closes.
   */
  apply?: (s: Snapshot, signal: AbortSignal) => void | Promise<void>;
  /**
   * Validates a verified release before it is staged; a throw rejects it
   * (INVALID_CONTENT). With it, the follower reports VALIDATED and takes
   * shadow assignments (validate only); without it, it reports no
   * VALIDATED and leaves shadow assignments alone. The follower does not
   * run the release's Wasm validator (pawld ran it when the release was
   * created, on the very content whose digest the follower verified).
   */
  validate?: (s: Snapshot, signal: AbortSignal) => void | Promise<void>;
  /** Checks the application's health after the apply and at the end of the health window; a throw reports it unhealthy. */
  healthCheck?: (s: Snapshot, signal: AbortSignal) => void | Promise<void>;
  /**
   * The W3C traceparent the ACKs of an assignment carry, as it is or from
   * a function of the assignment. Without it (or when the function returns
   * undefined), each apply is a new trace and each ACK a new span in it.
   */
  traceparent?: string | ((a: Assignment) => string | undefined);
  /** Downloads of one assignment that do not match it before it is rejected (default 5). */
  downloadAttempts?: number;
  /** Waits between retries, doubling from initialMs to maxMs with jitter (default 200 ms to 10 s). */
  backoff?: { initialMs: number; maxMs: number };
  /** Called with each event. */
  onEvent?: (e: FollowEvent) => void;
}

/** Default number of downloads of an assignment that may fail to match it. */
export const DEFAULT_DOWNLOAD_ATTEMPTS = 5;

/** maxReasonBytes is the longest ACK reason sent, as in the Go SDK. */
const maxReasonBytes = 4096;

/** maxEarlyResends bounds resends of a HEALTHY_ACKED that came before the server's window. */
const maxEarlyResends = 20;

// Kinds of failure of a verification: a download that does not match its
// assignment (downloaded again, up to downloadAttempts), and an app too old.
class Refusal extends Error {
  constructor(
    message: string,
    readonly code: RejectCode,
  ) {
    super(message);
  }
}

// AckExtra is what some states add to an ACK.
interface AckExtra {
  healthOk?: boolean;
  reason?: string;
  rejectCode?: RejectCode;
}

// permanent are the codes of failures that trying again does not mend (as
// in the Go SDK's sdk/backoff.go); any other failure of a call is retried.
const permanent = new Set([
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.FailedPrecondition,
  Code.Unauthenticated,
  Code.Unimplemented,
  Code.OutOfRange,
]);

/** follow starts following the instance's assignments over transport. */
export function follow(transport: Transport, opts: FollowOptions): Follower {
  return new Follower(transport, opts);
}

interface Job {
  key: string;
  abort: AbortController;
  done: Promise<void>;
}

interface ConfigState {
  highestEpoch: bigint;
  run?: Job;
  shadow?: Job;
  completed: Set<string>;
  // ran is the apply whose APPLIED the server took: a later STALE reports it.
  ran?: { a: Assignment; seq: bigint; digest: string };
}

/** Follower follows one instance's assignments until close. */
export class Follower {
  /** The boot ID of this follower: a new one each time it starts. */
  readonly bootId = randomUUID();
  /** Resolves when the follower stopped (after close). */
  readonly stopped: Promise<void>;

  private readonly instances: Client<typeof InstanceService>;
  private readonly releases: Client<typeof ReleaseService>;
  private readonly rollouts: Client<typeof RolloutService>;
  private readonly abort = new AbortController();
  private readonly configs = new Map<string, ConfigState>();
  private readonly applied = new Map<string, Snapshot>();
  private readonly waiters = new Set<() => void>();
  private epoch = 0n;
  private seq = 0n;

  constructor(
    transport: Transport,
    private readonly opts: FollowOptions,
  ) {
    if (!opts.workloadIdentity) {
      throw new Error("pawl: follow needs a workload identity");
    }
    if (typeof opts.traceparent === "string") {
      traceIdOf(opts.traceparent);
    }
    if (opts.downloadAttempts !== undefined && !(opts.downloadAttempts >= 1)) {
      throw new Error(`pawl: downloadAttempts ${opts.downloadAttempts}: must be at least 1`);
    }
    this.instances = createClient(InstanceService, transport);
    this.releases = createClient(ReleaseService, transport);
    this.rollouts = createClient(RolloutService, transport);
    this.stopped = this.run();
  }

  /** current returns the snapshot of config the application was last given, if any. */
  current(config: string): Snapshot | undefined {
    return this.applied.get(config);
  }

  /** waitFor resolves with config's snapshot once ok holds for it. */
  async waitFor(config: string, ok: (s: Snapshot) => boolean, signal?: AbortSignal): Promise<Snapshot> {
    for (;;) {
      const s = this.applied.get(config);
      if (s !== undefined && ok(s)) {
        return s;
      }
      await new Promise<void>((resolve, reject) => {
        const wake = () => {
          this.waiters.delete(wake);
          signal?.removeEventListener("abort", wake);
          if (signal?.aborted) {
            reject(signal.reason);
          } else if (this.abort.signal.aborted) {
            reject(new Error("pawl: the follower is closed"));
          } else {
            resolve();
          }
        };
        this.waiters.add(wake);
        signal?.addEventListener("abort", wake);
        if (signal?.aborted || this.abort.signal.aborted) {
          wake();
        }
      });
    }
  }

  /** close stops following, abandons applies in flight and waits for the follower to stop. */
  async close(): Promise<void> {
    this.abort.abort(new Error("pawl: the follower is closed"));
    this.wake();
    await this.stopped;
    const jobs: Promise<void>[] = [];
    for (const c of this.configs.values()) {
      for (const j of [c.run, c.shadow]) {
        if (j !== undefined) {
          jobs.push(j.done);
        }
      }
    }
    await Promise.all(jobs);
  }

  private wake(): void {
    for (const w of [...this.waiters]) {
      w();
    }
  }

  private emit(e: FollowEvent): void {
    this.opts.onEvent?.(e);
  }

  // run registers and follows the assignment stream until close, resuming
  // after the last revision seen, with backoff between attempts.
  private async run(): Promise<void> {
    const signal = this.abort.signal;
    const set = new Map<string, Assignment[]>();
    const after = { revision: 0n };
    const backoff = this.backoff();
    while (!signal.aborted) {
      try {
        if (this.epoch === 0n) {
          await this.register(signal);
        }
        await this.watch(signal, after, set, backoff.reset);
        throw new ConnectError("the server ended the assignment stream", Code.Unavailable);
      } catch (e) {
        if (signal.aborted) {
          return;
        }
        const err = ConnectError.from(e);
        if (err.code === Code.FailedPrecondition || err.code === Code.NotFound) {
          this.epoch = 0n; // the server does not know this registration: register again
        } else if (err.code === Code.InvalidArgument) {
          after.revision = 0n; // a revision beyond the server's: start over with a full set
        }
        this.emit({ kind: "error", what: "the assignment stream", error: err });
      }
      await backoff.wait(signal);
    }
  }

  private async register(signal: AbortSignal): Promise<void> {
    const o = this.opts;
    const resp = await this.instances.register(
      {
        instance: create(InstanceSchema, {
          workloadIdentity: o.workloadIdentity,
          bootId: this.bootId,
          zone: o.zone ?? "",
          role: o.role ?? "",
          trafficWeight: o.trafficWeight ?? 0,
          appVersion: o.appVersion ?? "",
          labels: o.labels ?? {},
        }),
      },
      { signal },
    );
    const epoch = resp.record?.membershipEpoch ?? 0n;
    if (epoch <= 0n) {
      throw new ConnectError(`register ${o.workloadIdentity}: the server returned no membership epoch`, Code.Internal);
    }
    this.epoch = epoch;
    this.emit({ kind: "registered", epoch });
  }

  private async watch(signal: AbortSignal, after: { revision: bigint }, set: Map<string, Assignment[]>, received: () => void): Promise<void> {
    const stream = this.instances.watchAssignments(
      { workloadIdentity: this.opts.workloadIdentity, bootId: this.bootId, deltas: true, afterRevision: after.revision },
      { signal },
    );
    for await (const msg of stream) {
      received();
      if (msg.revision < after.revision) {
        continue; // never go back to an older set
      }
      const changed = new Set<string>();
      if (msg.full) {
        for (const id of set.keys()) {
          changed.add(id);
        }
        set.clear();
      }
      for (const id of msg.removedConfigIds) {
        set.delete(id);
        changed.add(id);
      }
      const delta = new Map<string, Assignment[]>();
      for (const a of msg.assignments) {
        delta.set(a.configId, [...(delta.get(a.configId) ?? []), a]);
      }
      for (const [id, as] of delta) {
        set.set(id, as);
        changed.add(id);
      }
      after.revision = msg.revision;
      for (const id of [...changed].sort()) {
        if (this.opts.configs !== undefined && !this.opts.configs.includes(id)) {
          continue;
        }
        const as = set.get(id) ?? [];
        this.offer(
          id,
          as.find((a) => !a.shadow),
          as.find((a) => a.shadow),
        );
      }
    }
  }

  // offer moves config's applies to its newest assignments: an assignment
  // of a lower epoch than one seen is ignored, the same release keeps its
  // apply, a completed one that is what runs is not repeated, and another
  // cancels the apply in flight and starts its own.
  private offer(config: string, run: Assignment | undefined, shadow: Assignment | undefined): void {
    let c = this.configs.get(config);
    if (c === undefined) {
      c = { highestEpoch: 0n, completed: new Set() };
      this.configs.set(config, c);
    }
    if (run !== undefined && run.epoch < c.highestEpoch) {
      return;
    }
    if (run !== undefined) {
      c.highestEpoch = run.epoch;
    }
    c.run = this.replace(c, c.run, run, false);
    c.shadow = this.replace(c, c.shadow, this.opts.validate !== undefined ? shadow : undefined, true);
  }

  private replace(c: ConfigState, cur: Job | undefined, a: Assignment | undefined, shadow: boolean): Job | undefined {
    if (a === undefined) {
      if (cur !== undefined && shadow) {
        cur.abort.abort(); // a shadow validation in flight is abandoned
        return undefined;
      }
      return cur; // what was applied stays
    }
    const key = `${a.generation}/${a.contentDigest}/${a.validatorDigest}/${shadow}`;
    if (cur?.key === key) {
      return cur;
    }
    cur?.abort.abort();
    if (c.completed.has(key)) {
      // Done already, and what runs (a release assigned again after a
      // rollback is applied again).
      const s = this.applied.get(a.configId);
      if (shadow || (s !== undefined && s.generation === a.generation && s.contentDigest === a.contentDigest)) {
        return undefined;
      }
    }
    const abort = new AbortController();
    const onClose = () => abort.abort();
    this.abort.signal.addEventListener("abort", onClose);
    const before = cur?.done ?? Promise.resolve();
    const done = before
      .then(() => (abort.signal.aborted ? false : this.apply(c, a, shadow, abort.signal)))
      .then(
        (completed) => {
          if (completed) {
            c.completed.add(key);
          }
        },
        (e) => {
          if (!abort.signal.aborted) {
            this.emit({ kind: "error", what: `the apply of ${a.configId} generation ${a.generation}`, error: ConnectError.from(e) });
          }
        },
      )
      .finally(() => this.abort.signal.removeEventListener("abort", onClose));
    return { key, abort, done };
  }

  // apply takes one assignment through download, verify, (validate),
  // stage, apply and the health window, reporting each step. It returns
  // whether the assignment was completed (applied and reported, or
  // rejected); false means it was cancelled.
  private async apply(c: ConfigState, a: Assignment, shadow: boolean, signal: AbortSignal): Promise<boolean> {
    const seq = ++this.seq;
    const traceId = newTraceId();
    const given = typeof this.opts.traceparent === "function" ? this.opts.traceparent(a) : this.opts.traceparent;
    if (given !== undefined) {
      traceIdOf(given);
    }
    let digest = a.contentDigest;
    let appliedAt = -1;
    const report = (state: InstanceState, extra: AckExtra = {}) =>
      this.sendAck(a, seq, digest, state, given ?? childTraceparent(traceId), extra, signal, () =>
        // Whole milliseconds, rounded down: the time held can only fall short.
        state === InstanceState.HEALTHY_ACKED && appliedAt >= 0 ? durationFromMs(Math.floor(performance.now() - appliedAt)) : undefined,
      );
    const reject = async (code: RejectCode, reason: string) => {
      this.emit({ kind: "rejected", config: a.configId, generation: a.generation, code, reason });
      await report(InstanceState.REJECTED, { rejectCode: code, reason });
      return true;
    };
    // download fetches the release; a failure for good rejects it. It
    // returns undefined when the apply ends (rejected or cancelled).
    let rejected = false;
    const download = async (): Promise<Release | undefined> => {
      try {
        return await this.download(a, signal);
      } catch (e) {
        if (!signal.aborted) {
          rejected = await reject(RejectCode.DOWNLOAD_FAILED, `download ${a.configId} generation ${a.generation}: ${ConnectError.from(e).message}`);
        }
        return undefined;
      }
    };
    try {
      await report(InstanceState.DISCOVERED);
      let release = await download();
      if (release === undefined) {
        return rejected;
      }
      await report(InstanceState.DOWNLOADED);
      const attempts = this.opts.downloadAttempts ?? DEFAULT_DOWNLOAD_ATTEMPTS;
      const backoff = this.backoff();
      for (let attempt = 1; ; attempt++) {
        const { computed, refusal } = this.verify(a, release);
        if (computed !== "") {
          digest = computed;
        }
        if (refusal === undefined) {
          break;
        }
        if (refusal.code !== RejectCode.DIGEST_MISMATCH) {
          return await reject(refusal.code, refusal.message);
        }
        if (attempt >= attempts) {
          return await reject(refusal.code, `${refusal.message} (${attempt} downloads, none matched; downloadAttempts sets how many)`);
        }
        await backoff.wait(signal);
        if (signal.aborted) {
          return false;
        }
        release = await download();
        if (release === undefined) {
          return rejected;
        }
      }
      const spec = release.spec!;
      const snap: Snapshot = {
        config: a.configId,
        generation: a.generation,
        epoch: a.epoch,
        stage: a.stage,
        contentDigest: release.contentDigest,
        validatorDigest: spec.validatorDigest,
        mediaType: spec.mediaType,
        content: spec.content,
      };
      if (this.opts.validate !== undefined) {
        try {
          await this.opts.validate(snap, signal);
        } catch (e) {
          if (signal.aborted) {
            return false;
          }
          return await reject(RejectCode.INVALID_CONTENT, `the validator rejected the content: ${errorText(e)}`);
        }
        await report(InstanceState.VALIDATED);
        if (shadow) {
          return true;
        }
      }
      await report(InstanceState.STAGED);
      try {
        await this.opts.apply?.(snap, signal);
      } catch (e) {
        if (signal.aborted) {
          return false;
        }
        return await reject(RejectCode.APPLY_FAILED, `the application's applier failed: ${errorText(e)}`);
      }
      if (signal.aborted) {
        return false;
      }
      this.applied.set(a.configId, snap);
      this.wake();
      this.emit({ kind: "applied", snapshot: snap });
      appliedAt = performance.now();
      const took = await report(InstanceState.APPLIED);
      if (took !== undefined) {
        await this.movedPast(c, a, seq, digest, signal);
      }

      // The health window starts once the server has APPLIED.
      const window = spec.healthWindow !== undefined ? durationMs(spec.healthWindow) : 0;
      let unhealthy = await this.check(snap, signal);
      if (unhealthy === undefined) {
        await sleep(window, signal);
        unhealthy = await this.check(snap, signal);
      }
      if (signal.aborted) {
        return false;
      }
      await report(InstanceState.HEALTHY_ACKED, unhealthy === undefined ? { healthOk: true } : { healthOk: false, reason: unhealthy });
      return true;
    } catch (e) {
      if (signal.aborted) {
        return false;
      }
      throw e;
    }
  }

  // check runs the application's health check, returning why it failed.
  private async check(s: Snapshot, signal: AbortSignal): Promise<string | undefined> {
    try {
      await this.opts.healthCheck?.(s, signal);
      return undefined;
    } catch (e) {
      return `health check failed: ${errorText(e)}`;
    }
  }

  // movedPast records that the server took this apply's APPLIED and, when
  // the config's previous apply of this boot was of another generation,
  // reports STALE for that one.
  private async movedPast(c: ConfigState, a: Assignment, seq: bigint, digest: string, signal: AbortSignal): Promise<void> {
    const prev = c.ran;
    c.ran = { a, seq, digest };
    if (prev === undefined || prev.a.generation === a.generation) {
      return;
    }
    await this.sendAck(prev.a, prev.seq, prev.digest, InstanceState.STALE, childTraceparent(newTraceId()), {
      reason: `the assignment moved past generation ${prev.a.generation}: generation ${a.generation} is applied`,
    }, signal, () => undefined);
  }

  // download fetches the release (without its membership), retrying
  // transient failures until signal aborts.
  private download(a: Assignment, signal: AbortSignal): Promise<Release> {
    return this.retry(signal, async () => {
      const resp = await this.releases.getRelease(
        { configId: a.configId, generation: a.generation, omitMembership: true, workloadIdentity: this.opts.workloadIdentity },
        { signal },
      );
      if (resp.release?.spec === undefined) {
        throw new ConnectError("the server sent no release", Code.Internal);
      }
      return resp.release;
    });
  }

  // verify checks a download against the assignment, as the Go SDK does:
  // it is the release assigned, its content hashes to the assigned digest,
  // it names the assigned digests, and this instance's app version is
  // recent enough. It returns the content digest it computed ("" when the
  // content cannot be canonicalized).
  private verify(a: Assignment, r: Release): { computed: string; refusal?: Refusal } {
    const spec = r.spec!;
    const corrupt = (msg: string) => new Refusal(msg, RejectCode.DIGEST_MISMATCH);
    let computed: string;
    try {
      computed = contentDigest(spec.mediaType, spec.content);
    } catch (e) {
      return { computed: "", refusal: corrupt(`content digest mismatch: the content cannot be canonicalized: ${errorText(e)}`) };
    }
    if (spec.configId !== a.configId || r.generation !== a.generation) {
      return {
        computed,
        refusal: corrupt(`the server sent ${spec.configId} generation ${r.generation} for an assignment of ${a.configId} generation ${a.generation}`),
      };
    }
    if (computed !== a.contentDigest) {
      return { computed, refusal: corrupt(`content digest mismatch: the content hashes to ${computed}, the assignment names ${a.contentDigest}`) };
    }
    if (r.contentDigest !== a.contentDigest) {
      return { computed, refusal: corrupt(`content digest mismatch: the release names ${r.contentDigest}, the assignment ${a.contentDigest}`) };
    }
    if (spec.validatorDigest !== a.validatorDigest) {
      return { computed, refusal: corrupt(`wrong validator: the release names ${spec.validatorDigest}, the assignment ${a.validatorDigest}`) };
    }
    if (spec.minAppVersion !== "") {
      const floor = parseVersion(spec.minAppVersion);
      const app = this.opts.appVersion ?? "";
      if (floor === undefined || !atLeast(app, floor)) {
        return {
          computed,
          refusal: new Refusal(
            `app version too old: ${JSON.stringify(app)} is below the release's minimum ${JSON.stringify(spec.minAppVersion)}`,
            RejectCode.APP_TOO_OLD,
          ),
        };
      }
    }
    return { computed };
  }

  // sendAck reports state with traceparent, retrying transient failures
  // until signal aborts, and resends a healthy HEALTHY_ACKED the server
  // did not count because its measure of the health window fell short. It
  // returns the ACK as the server stored it, or undefined when the server
  // refused it (the event says why).
  private async sendAck(
    a: Assignment,
    seq: bigint,
    digest: string,
    state: InstanceState,
    traceparent: string,
    extra: AckExtra,
    signal: AbortSignal,
    held: () => ReturnType<typeof durationFromMs> | undefined,
  ): Promise<Ack | undefined> {
    const ack = create(AckSchema, {
      configId: a.configId,
      generation: a.generation,
      workloadIdentity: this.opts.workloadIdentity,
      bootId: this.bootId,
      contentDigest: digest,
      validatorDigest: a.validatorDigest,
      appArtifact: this.opts.appArtifact ?? "",
      appVersion: this.opts.appVersion ?? "",
      applySequence: seq,
      state,
      traceparent,
      ...extra,
      reason: cut(extra.reason ?? "", maxReasonBytes),
    });
    for (let attempt = 0; ; attempt++) {
      ack.held = held();
      let judged: Ack | undefined;
      try {
        judged = await this.retry(signal, async () => {
          if (this.epoch === 0n) {
            throw new ConnectError("the instance is registering again", Code.Unavailable);
          }
          ack.membershipEpoch = this.epoch;
          return (await this.rollouts.ack({ ack }, { signal })).ack;
        });
      } catch (e) {
        if (signal.aborted) {
          throw e;
        }
        this.emit({ kind: "error", what: `the ACK ${InstanceState[state]} of ${a.configId} generation ${a.generation}`, error: ConnectError.from(e) });
        return undefined;
      }
      if (judged !== undefined) {
        this.emit({ kind: "acked", ack: judged });
      }
      const early =
        state === InstanceState.HEALTHY_ACKED && ack.healthOk && judged !== undefined && !judged.counted && judged.notCountedReason.startsWith("health window:");
      if (!early || attempt === maxEarlyResends) {
        return judged;
      }
      const window = ack.held !== undefined ? durationMs(ack.held) : 0;
      await sleep(Math.min(Math.max(window / 4, 100), 5000), signal);
      if (signal.aborted) {
        throw signal.reason;
      }
    }
  }

  // retry runs fn until it succeeds, fails with an error that is not
  // transient, or signal aborts, waiting with backoff between attempts.
  private async retry<T>(signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
    const backoff = this.backoff();
    for (;;) {
      try {
        return await fn();
      } catch (e) {
        if (signal.aborted || !(e instanceof ConnectError) || permanent.has(e.code)) {
          throw e; // an error of this process, not of the call, is not retried either
        }
        await backoff.wait(signal);
        if (signal.aborted) {
          throw e;
        }
      }
    }
  }

  private backoff(): { wait: (signal: AbortSignal) => Promise<void>; reset: () => void } {
    const { initialMs, maxMs } = this.opts.backoff ?? { initialMs: 200, maxMs: 10_000 };
    let next = initialMs;
    return {
      wait: async (signal) => {
        const ms = next / 2 + Math.random() * (next / 2);
        next = Math.min(next * 2, maxMs);
        await sleep(ms, signal);
      },
      reset: () => {
        next = initialMs;
      },
    };
  }
}

// sleep waits ms, or until signal aborts (then it resolves early).
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) {
      resolve();
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

// cut shortens s to at most max UTF-8 bytes, on a character boundary.
function cut(s: string, max: number): string {
  const b = new TextEncoder().encode(s);
  if (b.length <= max) {
    return s;
  }
  let out = "";
  let n = 0;
  for (const ch of s) {
    const size = new TextEncoder().encode(ch).length;
    if (n + size > max) {
      break;
    }
    out += ch;
    n += size;
  }
  return out;
}

// parseVersion and atLeast compare app versions as sdk/appversion does:
// dotted numbers, an optional leading "v", anything after "-" or "+"
// ignored, missing parts zero.
function parseVersion(v: string): number[] | undefined {
  let core = v.startsWith("v") ? v.slice(1) : v;
  const i = core.search(/[-+]/);
  if (i >= 0) {
    core = core.slice(0, i);
  }
  if (core === "") {
    return undefined;
  }
  const out: number[] = [];
  for (const part of core.split(".")) {
    if (!/^[0-9]+$/.test(part)) {
      return undefined;
    }
    out.push(Number(part));
  }
  return out;
}

function atLeast(v: string, min: number[]): boolean {
  const got = parseVersion(v);
  if (got === undefined) {
    return false;
  }
  for (let i = 0; i < Math.max(got.length, min.length); i++) {
    const a = got[i] ?? 0;
    const b = min[i] ?? 0;
    if (a !== b) {
      return a > b;
    }
  }
  return true;
}
