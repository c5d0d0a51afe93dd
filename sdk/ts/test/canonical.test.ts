// The canonical content digest against the Go SDK's test vectors.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { CanonicalError, canonicalForm, contentDigest } from "../src/index.js";
import { env } from "./env.js";

interface Vector {
  name: string;
  media_type: string;
  content: string;
  canonical: string;
  digest: string;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

test("the canonical form and digest of every vector of sdk/canonical/testdata/vectors.json", () => {
  const vectors = JSON.parse(readFileSync(env.vectors, "utf8")) as Vector[];
  assert.ok(vectors.length >= 7, `only ${vectors.length} vectors`);
  for (const v of vectors) {
    const content = enc.encode(v.content);
    assert.equal(dec.decode(canonicalForm(v.media_type, content)), v.canonical, v.name);
    assert.equal(contentDigest(v.media_type, content), v.digest, v.name);
  }
});

test("JSON that cannot be canonicalized is refused", () => {
  for (const bad of [
    "",
    "{",
    '{"a":1,"a":2}',
    "[1,]",
    "1 2",
    "[1e400]",
    "\ufeff{}",
    "'x'",
    "[01]",
    '"\t"',
    "NaN",
  ]) {
    assert.throws(() => canonicalForm("application/json", enc.encode(bad)), CanonicalError, JSON.stringify(bad));
  }
  assert.throws(() => canonicalForm("application/json", new Uint8Array([0x22, 0xff, 0x22])), CanonicalError, "invalid UTF-8");
  // Not JSON: any bytes, as they are.
  const raw = new Uint8Array([0xff, 0x00, 0x7b]);
  assert.deepEqual(canonicalForm("application/octet-stream", raw), raw);
});

test("a lone surrogate escape becomes U+FFFD, as in Go", () => {
  assert.equal(dec.decode(canonicalForm("application/json", enc.encode('"\\ud800x"'))), '"\ufffdx"');
});
