// Followers take a release through a rollout against a real pawld: the
// download is verified against the assignment's content digest, applied
// and ACKed with W3C trace context; a download a man in the middle
// changed is rejected and never applied.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { durationFromMs } from "@bufbuild/protobuf/wkt";

import { InstanceService } from "../../../gen/ts/pawl/v1/instance_pb.js";
import { AckPolicyKind, ReleaseService } from "../../../gen/ts/pawl/v1/release_pb.js";
import { InstanceState, RejectCode, RolloutService, type Ack } from "../../../gen/ts/pawl/v1/rollout_pb.js";
import { contentDigest, createTransport, follow, type FollowEvent, type Follower, type Snapshot } from "../src/index.js";
import { awaitKV, env, operator } from "./env.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
const releases = createClient(ReleaseService, operator());
const rollouts = createClient(RolloutService, operator());
const instances = createClient(InstanceService, operator());

const followers: Follower[] = [];
after(() => Promise.all(followers.map((f) => f.close())));

// start follows as instance id, labelled group, through url, recording what it applied and
// the errors it met.
function start(id: string, group: string, url: string, more: { traceparent?: string; downloadAttempts?: number } = {}) {
  const applied: Snapshot[] = [];
  const errors: FollowEvent[] = [];
  const f = follow(createTransport(url, { token: env.instanceToken }), {
    workloadIdentity: id,
    zone: "zone-a",
    appVersion: "2.0.0",
    labels: { group },
    backoff: { initialMs: 10, maxMs: 200 },
    apply: (s) => {
      applied.push(s);
    },
    onEvent: (e) => {
      if (e.kind === "error") {
        console.error(`${id}: ${e.what}: ${e.error.message}`);
        errors.push(e);
      }
    },
    ...more,
  });
  followers.push(f);
  return { f, applied, errors };
}

async function registered(ids: string[], signal: AbortSignal) {
  await awaitKV(
    "/_pawl/instances/",
    async () => {
      const live = new Set((await instances.listInstances({})).instances.filter((r) => r.live).map((r) => r.instance?.workloadIdentity));
      return ids.every((id) => live.has(id));
    },
    signal,
  );
}

function routing(weight: number): Uint8Array {
  return enc.encode(`{"upstreams":[{"host":"a","weight":${weight}},{"host":"b","weight":${100 - weight}}]}`);
}

// release cuts a release of config for the instances of group.
async function release(config: string, group: string, weight: number) {
  const resp = await releases.createRelease({
    spec: {
      configId: config,
      mediaType: "application/json",
      validatorDigest: env.validatorDigest,
      content: routing(weight),
      selector: { group },
      stages: [{ name: "everyone", policy: { kind: AckPolicyKind.ALL } }],
      healthWindow: durationFromMs(100),
      deadline: durationFromMs(3_600_000),
    },
  });
  assert.ok(resp.release !== undefined);
  return resp.release;
}

const ended = (s?: InstanceState): boolean => s === InstanceState.HEALTHY_ACKED || s === InstanceState.REJECTED;

// acksOf waits until every id's last ACK of config's generation gen ends
// its apply (HEALTHY_ACKED or REJECTED; or whatever until says), and
// returns each id's ACKs in order.
async function acksOf(config: string, gen: bigint, ids: string[], signal: AbortSignal, until = ended) {
  const byId = new Map<string, Ack[]>();
  const seen = () =>
    [...byId].map(([id, acks]) => `${id}: ${acks.map((a) => `${InstanceState[a.state]}${a.counted ? "" : ` (not counted: ${a.notCountedReason})`}`).join(", ")}`);
  const report = () => console.error(`waiting on the ACKs of ${config} generation ${gen}; ACKs:\n${seen().join("\n")}`);
  signal.addEventListener("abort", report);
  await awaitKV(
    "/_pawl/acks/",
    async () => {
      const st = await rollouts.getRolloutStatus({ configId: config, generation: gen, ackPageSize: 1000 });
      byId.clear();
      for (const a of st.acks) {
        byId.set(a.workloadIdentity, [...(byId.get(a.workloadIdentity) ?? []), a]);
      }
      return ids.every((id) => until(byId.get(id)?.at(-1)?.state));
    },
    signal,
  ).finally(() => signal.removeEventListener("abort", report));
  return byId;
}

const states = (acks: Ack[] | undefined) => (acks ?? []).map((a) => InstanceState[a.state]);

test("followers take a release to HEALTHY_ACKED, verified, with the caller's or their own trace context", { timeout: 40_000 }, async () => {
  const signal = AbortSignal.timeout(30_000);
  const given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const withTrace = start("ts-given", "traced", env.url, { traceparent: given });
  const ownTrace = start("ts-own", "traced", env.url);
  await registered(["ts-given", "ts-own"], signal);

  const rel = await release("ts-routing", "traced", 30);
  assert.equal(rel.contentDigest, contentDigest("application/json", routing(30)), "the digest computed here is the server's");
  const byId = await acksOf("ts-routing", rel.generation, ["ts-given", "ts-own"], signal);

  for (const { id, follower } of [
    { id: "ts-given", follower: withTrace },
    { id: "ts-own", follower: ownTrace },
  ]) {
    const acks = byId.get(id)!;
    assert.deepEqual(states(acks), ["DISCOVERED", "DOWNLOADED", "STAGED", "APPLIED", "HEALTHY_ACKED"], id);
    for (const a of acks) {
      assert.ok(a.counted, `${id} ${InstanceState[a.state]} not counted: ${a.notCountedReason}`);
      assert.equal(a.contentDigest, rel.contentDigest);
      assert.equal(a.bootId, follower.f.bootId);
    }
    assert.ok(acks.at(-1)!.healthOk);
    assert.deepEqual(follower.errors, [], `${id} met errors`);
    assert.equal(follower.applied.length, 1);
    const s = follower.applied[0];
    assert.equal(dec.decode(s.content), dec.decode(routing(30)));
    assert.equal(s.generation, rel.generation);
    assert.equal(follower.f.current("ts-routing")?.contentDigest, rel.contentDigest);
  }

  // The caller's traceparent is sent as it is, and the server keeps its trace ID.
  for (const a of byId.get("ts-given")!) {
    assert.equal(a.traceparent, given);
    assert.equal(a.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  }
  // Without one: one trace per apply, a span per ACK.
  const own = byId.get("ts-own")!;
  const traceId = own[0].traceId;
  assert.match(traceId, /^[0-9a-f]{32}$/);
  const spans = new Set<string>();
  for (const a of own) {
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(a.traceparent);
    assert.ok(m !== null, a.traceparent);
    assert.equal(m[1], traceId);
    assert.equal(a.traceId, traceId);
    spans.add(m[2]);
  }
  assert.equal(spans.size, own.length, "each ACK is a span of its own");

  const st = await rollouts.getRolloutStatus({ configId: "ts-routing", generation: rel.generation });
  assert.deepEqual(
    st.stages.map((s) => s.outcome),
    ["passed"],
  );
});

test("a download a man in the middle changed is rejected with DIGEST_MISMATCH and never applied", { timeout: 40_000 }, async () => {
  const signal = AbortSignal.timeout(30_000);
  const tampered = start("ts-tampered", "tampered", env.tamperUrl, { downloadAttempts: 2 });
  await registered(["ts-tampered"], signal);
  const rel = await release("ts-tampered", "tampered", 40);
  const acks = (await acksOf("ts-tampered", rel.generation, ["ts-tampered"], signal)).get("ts-tampered")!;
  assert.deepEqual(states(acks), ["DISCOVERED", "DOWNLOADED", "REJECTED"]);
  const rejected = acks.at(-1)!;
  assert.equal(rejected.rejectCode, RejectCode.DIGEST_MISMATCH);
  assert.match(rejected.reason, /^content digest mismatch: the content hashes to sha256:[0-9a-f]{64}, the assignment names sha256:/);
  assert.match(rejected.reason, /\(2 downloads, none matched; downloadAttempts sets how many\)$/);
  // As the Go SDK does, the rejection reports the digest it computed: kept
  // for audit, not counted against the stage.
  assert.notEqual(rejected.contentDigest, rel.contentDigest);
  assert.equal(rejected.counted, false);
  assert.deepEqual(tampered.applied, []);
  assert.equal(tampered.f.current("ts-tampered"), undefined);
});

// pointer returns config's active generation and epoch.
async function pointer(config: string) {
  const p = (await rollouts.getPointer({ configId: config })).pointer;
  return { expectedGeneration: p?.generation ?? 0n, expectedEpoch: p?.epoch ?? 0n };
}

test("a newer release makes the follower report STALE for the one it ran, and a rollback applies that one again", { timeout: 40_000 }, async () => {
  const signal = AbortSignal.timeout(30_000);
  const { f } = start("ts-stale", "stale", env.url);
  await registered(["ts-stale"], signal);
  const isStale = (s?: InstanceState): boolean => s === InstanceState.STALE;

  const first = await release("ts-stale", "stale", 10);
  await acksOf("ts-stale", first.generation, ["ts-stale"], signal);
  await rollouts.promote({ configId: "ts-stale", generation: first.generation, ...(await pointer("ts-stale")), idempotencyKey: "ts-promote-1" });
  const second = await release("ts-stale", "stale", 20);
  const healthy2 = (await acksOf("ts-stale", second.generation, ["ts-stale"], signal)).get("ts-stale")!;
  assert.equal(InstanceState[healthy2.at(-1)!.state], "HEALTHY_ACKED");
  const stale1 = (await acksOf("ts-stale", first.generation, ["ts-stale"], signal, isStale)).get("ts-stale")!.at(-1)!;
  assert.ok(stale1.counted, stale1.notCountedReason);
  assert.equal(stale1.reason, `the assignment moved past generation ${first.generation}: generation ${second.generation} is applied`);

  await rollouts.promote({ configId: "ts-stale", generation: second.generation, ...(await pointer("ts-stale")), idempotencyKey: "ts-promote-2" });
  const { expectedGeneration, expectedEpoch } = await pointer("ts-stale");
  await rollouts.rollback({ configId: "ts-stale", expectedGeneration, expectedEpoch, idempotencyKey: "ts-rollback" });
  const s = await f.waitFor("ts-stale", (s) => s.generation === first.generation, signal);
  assert.equal(dec.decode(s.content), dec.decode(routing(10)));
  const stale2 = (await acksOf("ts-stale", second.generation, ["ts-stale"], signal, isStale)).get("ts-stale")!.at(-1)!;
  assert.equal(stale2.reason, `the assignment moved past generation ${second.generation}: generation ${first.generation} is applied`);
});
