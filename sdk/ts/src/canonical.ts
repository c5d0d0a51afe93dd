// The canonical content digest of a release, as sdk/canonical/CANONICAL.md
// specifies and the Go SDK's sdk/canonical computes: sha256 over the
// domain string, the media type and the content's canonical form (RFC 8785
// for JSON media types, the bytes as they are otherwise). The test vectors
// in sdk/canonical/testdata/vectors.json are the contract.

import { createHash } from "node:crypto";

/** Domain prefixes the hashed bytes of every content digest. */
export const DOMAIN = "pawl.content.v1";

/** CanonicalError means JSON content could not be canonicalized. */
export class CanonicalError extends Error {
  constructor(why: string) {
    super(`canonical: invalid JSON content: ${why}`);
    this.name = "CanonicalError";
  }
}

/** baseMediaType lower-cases a media type and drops its parameters. */
export function baseMediaType(mediaType: string): string {
  return mediaType.split(";", 1)[0].trim().toLowerCase();
}

/** isJSON reports whether a media type is canonicalized as JSON. */
export function isJSON(mediaType: string): boolean {
  const mt = baseMediaType(mediaType);
  return mt === "application/json" || mt.endsWith("+json");
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/**
 * canonicalForm returns the canonical bytes of content: the RFC 8785
 * serialization for JSON media types, otherwise content itself. It throws
 * CanonicalError for JSON content that is not valid UTF-8, not exactly one
 * JSON value, or has duplicate keys.
 */
export function canonicalForm(mediaType: string, content: Uint8Array): Uint8Array {
  if (!isJSON(mediaType)) {
    return content;
  }
  let text: string;
  try {
    text = utf8.decode(content);
  } catch {
    throw new CanonicalError("not valid UTF-8");
  }
  return encoder.encode(new Parser(text).document());
}

/**
 * contentDigest returns "sha256:<hex>" of DOMAIN, NUL, the base media type,
 * NUL and the canonical form of content.
 */
export function contentDigest(mediaType: string, content: Uint8Array): string {
  const form = canonicalForm(mediaType, content);
  const h = createHash("sha256");
  h.update(DOMAIN);
  h.update(new Uint8Array([0]));
  h.update(baseMediaType(mediaType));
  h.update(new Uint8Array([0]));
  h.update(form);
  return "sha256:" + h.digest("hex");
}

/** maxDepth bounds nesting, as Go's encoding/json does. */
const maxDepth = 10000;

const numberToken = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

// Parser reads one JSON document strictly (RFC 8259) and writes its
// canonical form as it goes.
class Parser {
  private i = 0;
  constructor(private readonly s: string) {}

  document(): string {
    const out = this.value(0);
    this.space();
    if (this.i !== this.s.length) {
      throw new CanonicalError("data after the top-level value");
    }
    return out;
  }

  private space(): void {
    for (;;) {
      const c = this.s[this.i];
      if (c !== " " && c !== "\t" && c !== "\n" && c !== "\r") {
        return;
      }
      this.i++;
    }
  }

  private fail(what: string): never {
    throw new CanonicalError(`${what} at offset ${this.i}`);
  }

  private value(depth: number): string {
    if (depth > maxDepth) {
      this.fail("nested too deeply");
    }
    this.space();
    const c = this.s[this.i];
    switch (c) {
      case "{":
        return this.object(depth);
      case "[":
        return this.array(depth);
      case '"':
        return JSON.stringify(this.string());
    }
    for (const lit of ["true", "false", "null"]) {
      if (this.s.startsWith(lit, this.i)) {
        this.i += lit.length;
        return lit;
      }
    }
    numberToken.lastIndex = this.i;
    const m = numberToken.exec(this.s);
    if (m === null) {
      this.fail(c === undefined ? "unexpected end" : `unexpected character ${JSON.stringify(c)}`);
    }
    this.i += m[0].length;
    const n = Number(m[0]);
    if (!Number.isFinite(n)) {
      this.fail(`number ${m[0]} is outside the IEEE 754 double range`);
    }
    // ECMAScript's Number.prototype.toString is RFC 8785's number form
    // (and writes -0 as 0).
    return String(n);
  }

  private array(depth: number): string {
    this.i++; // [
    const items: string[] = [];
    this.space();
    if (this.s[this.i] === "]") {
      this.i++;
      return "[]";
    }
    for (;;) {
      items.push(this.value(depth + 1));
      this.space();
      const c = this.s[this.i++];
      if (c === "]") {
        return "[" + items.join(",") + "]";
      }
      if (c !== ",") {
        this.i--;
        this.fail("expected , or ] in an array");
      }
    }
  }

  private object(depth: number): string {
    this.i++; // {
    const members: [string, string][] = [];
    const seen = new Set<string>();
    this.space();
    if (this.s[this.i] === "}") {
      this.i++;
      return "{}";
    }
    for (;;) {
      this.space();
      if (this.s[this.i] !== '"') {
        this.fail("expected a string key");
      }
      const key = this.string();
      if (seen.has(key)) {
        this.fail(`duplicate object key ${JSON.stringify(key)}`);
      }
      seen.add(key);
      this.space();
      if (this.s[this.i++] !== ":") {
        this.i--;
        this.fail("expected : after an object key");
      }
      members.push([key, this.value(depth + 1)]);
      this.space();
      const c = this.s[this.i++];
      if (c === "}") {
        break;
      }
      if (c !== ",") {
        this.i--;
        this.fail("expected , or } in an object");
      }
    }
    // RFC 8785 sorts keys by their UTF-16 code units: JavaScript's own
    // string order.
    members.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return "{" + members.map(([k, v]) => JSON.stringify(k) + ":" + v).join(",") + "}";
  }

  // string reads a string token and returns its value. A lone surrogate
  // escape becomes U+FFFD, as Go's decoder makes it.
  private string(): string {
    const start = this.i++;
    for (;;) {
      const c = this.s.charCodeAt(this.i);
      if (Number.isNaN(c)) {
        this.fail("unterminated string");
      }
      if (c < 0x20) {
        this.fail("control character in a string");
      }
      this.i++;
      if (c === 0x22) {
        break;
      }
      if (c === 0x5c) {
        const e = this.s[this.i];
        if (e === "u") {
          if (!/^[0-9a-fA-F]{4}$/.test(this.s.slice(this.i + 1, this.i + 5))) {
            this.fail("invalid \\u escape");
          }
          this.i += 5;
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) {
          this.i++;
        } else {
          this.fail("invalid escape");
        }
      }
    }
    return (JSON.parse(this.s.slice(start, this.i)) as string).toWellFormed();
  }
}
