// Pawl validator ABI, version 1, for AssemblyScript guests
// (see validators/ABI.md).
//
// An author writes one function from Input to Verdict, registers it with
// handle, and re-exports the ABI's functions from the module's entry file:
//
//   import { handle, Input, Verdict } from "../path/to/guest-as/assembly";
//   export { pawl_abi_version, pawl_alloc, pawl_validate } from "../path/to/guest-as/assembly";
//
//   function validate(input: Input): Verdict {
//     const v = new Verdict();
//     if (input.configLen == 0) v.error("", "empty config");
//     return v;
//   }
//   handle(validate);
//
// Built with `--use abort=` (see asconfig.json of the example) the module
// imports nothing. json.ts parses JSON the way Go's encoding/json does, so
// a port of a Go validator can reach the same verdicts.

export { parse, Doc, keyMatches, goName, KIND_NULL, KIND_BOOL, KIND_NUMBER, KIND_STRING, KIND_ARRAY, KIND_OBJECT } from "./json";

/** The ABI version this library implements. */
export const ABI_VERSION: i32 = 1;

/** How serious a violation is: any error makes the verdict invalid. */
export enum Severity {
  Error,
  Warning,
}

/** One problem found in the config. */
export class Violation {
  constructor(
    /** A JSON Pointer (RFC 6901) to the problem; empty for the whole config. */
    public path: string,
    /** What is wrong, for a person. */
    public message: string,
    /** Error or warning. */
    public severity: Severity,
  ) {}
}

/** A validation's result: valid exactly when no violation is an error. */
export class Verdict {
  violations: Violation[] = [];
  /** JSON Pointers of the config's secret values, which hosts redact. */
  secrets: string[] = [];

  /** Adds an error at path. */
  error(path: string, message: string): void {
    this.violations.push(new Violation(path, message, Severity.Error));
  }

  /** Adds a warning at path. */
  warning(path: string, message: string): void {
    this.violations.push(new Violation(path, message, Severity.Warning));
  }

  /** Marks the value at path secret. */
  secret(path: string): void {
    this.secrets.push(path);
  }

  /** Reports whether no violation is an error. */
  valid(): bool {
    for (let i = 0; i < this.violations.length; i++) {
      if (this.violations[i].severity != Severity.Warning) return false;
    }
    return true;
  }
}

/**
 * The four fields of a validation's input (validators/ABI.md, "Input"),
 * as addresses and lengths in linear memory, valid during the call.
 */
export class Input {
  configPtr: usize = 0;
  configLen: i32 = 0;
  mediaTypePtr: usize = 0;
  mediaTypeLen: i32 = 0;
  namePtr: usize = 0;
  nameLen: i32 = 0;
  /** The parameters (a JSON document); paramsLen is 0 when there are none. */
  paramsPtr: usize = 0;
  paramsLen: i32 = 0;

  /** The media type, e.g. "application/json". */
  mediaType(): string {
    return String.UTF8.decodeUnsafe(this.mediaTypePtr, this.mediaTypeLen);
  }

  /** The config's ID or key. */
  name(): string {
    return String.UTF8.decodeUnsafe(this.namePtr, this.nameLen);
  }
}

/**
 * Decodes the four length-prefixed fields at ptr..ptr+len into input;
 * false if they are truncated. Bytes after the fourth field are ignored.
 */
export function decodeInput(ptr: usize, len: i32, input: Input): bool {
  const end = ptr + <usize>len;
  let p = ptr;
  const ptrs = new StaticArray<usize>(4);
  const lens = new StaticArray<i32>(4);
  for (let i = 0; i < 4; i++) {
    if (end - p < 4) return false;
    const n = load<u32>(p);
    p += 4;
    if (<u64>(end - p) < <u64>n) return false;
    ptrs[i] = p;
    lens[i] = <i32>n;
    p += <usize>n;
  }
  input.configPtr = ptrs[0];
  input.configLen = lens[0];
  input.mediaTypePtr = ptrs[1];
  input.mediaTypeLen = lens[1];
  input.namePtr = ptrs[2];
  input.nameLen = lens[2];
  input.paramsPtr = ptrs[3];
  input.paramsLen = lens[3];
  return true;
}

let handler: ((input: Input) => Verdict) | null = null;

/** Registers the validator function; call it once, at the top level. */
export function handle(fn: (input: Input) => Verdict): void {
  handler = fn;
}

/** Runs the registered validator on an encoded input; returns the encoded result. */
export function run(ptr: usize, len: i32): ArrayBuffer {
  const input = new Input();
  let v: Verdict;
  if (!decodeInput(ptr, len, input)) {
    v = new Verdict();
    v.error("", "abi: truncated input");
  } else if (handler == null) {
    v = new Verdict();
    v.error("", "guest: no validator registered; call handle at the top level");
  } else {
    const fn = changetype<(input: Input) => Verdict>(handler);
    v = fn(input);
  }
  return String.UTF8.encode(encode(v));
}

/** The result's JSON encoding (validators/ABI.md, "Result"). */
export function encode(v: Verdict): string {
  const parts = new Array<string>();
  parts.push(v.valid() ? '{"valid":true,"violations":[' : '{"valid":false,"violations":[');
  for (let i = 0; i < v.violations.length; i++) {
    const x = v.violations[i];
    if (i > 0) parts.push(",");
    parts.push('{"path":');
    parts.push(quoteJSON(x.path));
    parts.push(',"message":');
    parts.push(quoteJSON(x.message));
    parts.push(x.severity == Severity.Warning ? ',"severity":"warning"}' : ',"severity":"error"}');
  }
  parts.push("]");
  if (v.secrets.length > 0) {
    parts.push(',"secrets":[');
    for (let i = 0; i < v.secrets.length; i++) {
      if (i > 0) parts.push(",");
      parts.push(quoteJSON(v.secrets[i]));
    }
    parts.push("]");
  }
  parts.push("}");
  return parts.join("");
}

const HEX = "0123456789abcdef";

function quoteJSON(s: string): string {
  const parts = new Array<string>();
  parts.push('"');
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22 || c == 0x5c || c < 0x20) {
      parts.push(s.substring(from, i));
      if (c == 0x22) parts.push('\\"');
      else if (c == 0x5c) parts.push("\\\\");
      else parts.push("\\u00" + HEX.charAt(c >> 4) + HEX.charAt(c & 15));
      from = i + 1;
    }
  }
  parts.push(s.substring(from));
  parts.push('"');
  return parts.join("");
}

// The buffers behind the exports: the input the host writes and the result
// it reads, kept reachable from globals so the collector leaves them be.
// An instance serves one call at a time (validators/ABI.md).
let inputBuf = new ArrayBuffer(0);
let outputBuf = new ArrayBuffer(0);

/** pawl_abi_version: the ABI version. */
export function pawl_abi_version(): i32 {
  return ABI_VERSION;
}

/** pawl_alloc: size writable bytes, valid until the next validation. */
export function pawl_alloc(size: i32): usize {
  if (size < 0) size = 0;
  if (inputBuf.byteLength < size) inputBuf = new ArrayBuffer(size);
  return changetype<usize>(inputBuf);
}

/** pawl_validate: validates the input at ptr..ptr+len; returns (out_ptr << 32) | out_len. */
export function pawl_validate(ptr: usize, len: i32): i64 {
  outputBuf = run(ptr, len);
  return (<i64>changetype<usize>(outputBuf) << 32) | <i64>outputBuf.byteLength;
}
