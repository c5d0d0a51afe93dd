// Put, get and watch a key through the generated clients, over the Connect
// protocol and over gRPC, with a bearer token.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";

import { EventType, KVService } from "../../../gen/ts/pawl/v1/kv_pb.js";
import { createTransport } from "../src/index.js";
import { env, operator } from "./env.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

for (const protocol of ["connect", "grpc"] as const) {
  test(`put, get and watch a key over ${protocol}`, async () => {
    const kv = createClient(KVService, operator({ protocol }));
    const key = `/ts/${protocol}/greeting`;
    const ctl = new AbortController();
    const stream = kv.watch({ prefix: `/ts/${protocol}/` }, { signal: ctl.signal })[Symbol.asyncIterator]();
    const started = await stream.next();
    assert.equal(started.value?.kind.case, "started");

    const put = await kv.put({ key, value: enc.encode("hello") });
    assert.ok(put.revision > 0n);
    const got = await kv.get({ key });
    assert.equal(dec.decode(got.kv?.value), "hello");
    assert.equal(got.kv?.modRevision, put.revision);

    for (;;) {
      const r = await stream.next();
      assert.ok(!r.done, "the watch ended");
      if (r.value.kind.case !== "events") {
        continue; // progress
      }
      const [e] = r.value.kind.value.events;
      assert.equal(e.type, EventType.PUT);
      assert.equal(e.kv?.key, key);
      assert.equal(dec.decode(e.kv?.value), "hello");
      assert.equal(e.kv?.modRevision, put.revision);
      break;
    }
    ctl.abort();
  });
}

test("a call without the bearer token is refused with Unauthenticated, and a bad key with InvalidArgument", async () => {
  const anonymous = createClient(KVService, createTransport(env.url));
  await assert.rejects(anonymous.get({ key: "/ts/connect/greeting" }), (e) => ConnectError.from(e).code === Code.Unauthenticated);
  const kv = createClient(KVService, operator());
  await assert.rejects(kv.put({ key: "no-slash", value: enc.encode("x") }), (e) => ConnectError.from(e).code === Code.InvalidArgument);
});
