// Trace context and credentials are checked before anything is sent.

import assert from "node:assert/strict";
import { test } from "node:test";

import { bearer, childTraceparent, createTransport, follow, newTraceId, traceIdOf } from "../src/index.js";

test("traceparents pawld would refuse are refused here", () => {
  assert.equal(traceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(traceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"), "4bf92f3577b34da6a3ce929d0e0e4736");
  for (const bad of [
    "",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
  ]) {
    assert.throws(() => traceIdOf(bad), /is not a W3C traceparent/, bad);
  }
  const id = newTraceId();
  for (let i = 0; i < 100; i++) {
    assert.equal(traceIdOf(childTraceparent(id)), id);
  }
  const transport = createTransport("http://127.0.0.1:1");
  assert.throws(() => follow(transport, { workloadIdentity: "x", traceparent: "00-bad" }), /is not a W3C traceparent/);
  assert.throws(() => follow(transport, { workloadIdentity: "" }), /needs a workload identity/);
  assert.throws(() => follow(transport, { workloadIdentity: "x", downloadAttempts: 0 }), /must be at least 1/);
});

test("a bearer token must be one word", () => {
  for (const bad of ["", "two words", "line\nbreak"]) {
    assert.throws(() => bearer(bad), /bearer token/, JSON.stringify(bad));
  }
  assert.throws(() => createTransport("http://127.0.0.1:1", { protocol: "grpc-web" as "grpc" }), /neither "connect" nor "grpc"/);
});
