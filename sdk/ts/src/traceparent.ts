// W3C Trace Context (level 1) traceparent values, as ACKs carry them.

import { randomBytes } from "node:crypto";

const pattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * traceIdOf checks a traceparent as pawld does and returns its trace ID;
 * it throws for a value pawld would refuse.
 */
export function traceIdOf(traceparent: string): string {
  const m = pattern.exec(traceparent);
  const bad = (why: string) =>
    new Error(`pawl: traceparent ${JSON.stringify(traceparent)} is not a W3C traceparent (version-traceid-parentid-flags, lower-case hex): ${why}`);
  if (m === null) {
    throw bad("the fields are not 2, 32, 16 and 2 lower-case hex digits separated by '-'");
  }
  const [, version, traceId, parentId] = m;
  if (version === "ff") {
    throw bad("version ff is invalid");
  }
  if (version === "00" && m[5] !== undefined) {
    throw bad("version 00 has exactly four fields");
  }
  if (/^0+$/.test(traceId) || /^0+$/.test(parentId)) {
    throw bad("the trace ID and parent ID must not be all zero");
  }
  return traceId;
}

function nonZeroHex(bytes: number): string {
  for (;;) {
    const h = randomBytes(bytes).toString("hex");
    if (!/^0+$/.test(h)) {
      return h;
    }
  }
}

/** newTraceId returns a random trace ID (32 lower-case hex digits). */
export function newTraceId(): string {
  return nonZeroHex(16);
}

/**
 * childTraceparent returns a sampled version-00 traceparent in trace
 * traceId with a new span (parent) ID.
 */
export function childTraceparent(traceId: string): string {
  return `00-${traceId}-${nonZeroHex(8)}-01`;
}
