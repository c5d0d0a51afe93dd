// A JSON parser that accepts, rejects and decodes text as Go's
// encoding/json does: the same grammar, a nesting limit of 10,000, and
// strings decoded the same way (invalid UTF-8 and lone surrogates become
// U+FFFD). Numbers keep their literal text, so a caller decides, as Go's
// decoder does, whether 1e2 is an integer (it is not).
//
// The document is an arena of nodes, parsed without recursion, so a deep
// document cannot overflow the stack.

export const KIND_NULL: u8 = 0;
export const KIND_BOOL: u8 = 1;
export const KIND_NUMBER: u8 = 2;
export const KIND_STRING: u8 = 3;
export const KIND_ARRAY: u8 = 4;
export const KIND_OBJECT: u8 = 5;

/** The most nested arrays and objects Go's decoder accepts. */
export const MAX_DEPTH: i32 = 10000;

/** The name Go's encoding/json gives a kind in a type error. */
export function goName(kind: u8): string {
  switch (kind) {
    case KIND_BOOL:
      return "bool";
    case KIND_NUMBER:
      return "number";
    case KIND_STRING:
      return "string";
    case KIND_ARRAY:
      return "array";
    case KIND_OBJECT:
      return "object";
  }
  return "null";
}

/**
 * A parsed document: node i has kind[i], its literal text at
 * src+start[i]..src+end[i], a string's decoded text[i], and an array's
 * elements or an object's alternating keys and values at
 * kids[kidsStart[i]..kidsStart[i]+kidsLen[i]].
 */
export class Doc {
  src: usize = 0;
  kind: u8[] = [];
  start: i32[] = [];
  end: i32[] = [];
  text: string[] = [];
  kidsStart: i32[] = [];
  kidsLen: i32[] = [];
  kids: i32[] = [];
  root: i32 = -1;

  /** An array's element count or an object's member count. */
  count(n: i32): i32 {
    return this.kind[n] == KIND_OBJECT ? this.kidsLen[n] >> 1 : this.kind[n] == KIND_ARRAY ? this.kidsLen[n] : 0;
  }

  /** An array's element i. */
  item(n: i32, i: i32): i32 {
    return this.kids[this.kidsStart[n] + i];
  }

  /** An object's key i (its decoded text). */
  key(n: i32, i: i32): string {
    return this.text[this.kids[this.kidsStart[n] + 2 * i]];
  }

  /** An object's value i. */
  value(n: i32, i: i32): i32 {
    return this.kids[this.kidsStart[n] + 2 * i + 1];
  }

  /** A value's literal text. */
  raw(n: i32): string {
    return String.UTF8.decodeUnsafe(this.src + <usize>this.start[n], <usize>(this.end[n] - this.start[n]));
  }

  /**
   * Reads a number as Go's strconv.ParseInt(text, 10, 64): ok is false for
   * fractions, exponents and values out of the int64 range.
   */
  int(n: i32): IntResult {
    const r = new IntResult();
    if (this.kind[n] != KIND_NUMBER) return r;
    let p = this.src + <usize>this.start[n];
    const e = this.src + <usize>this.end[n];
    let neg = false;
    if (load<u8>(p) == 0x2d) {
      neg = true;
      p++;
    }
    if (p == e) return r;
    let v: u64 = 0;
    const limit: u64 = neg ? 9223372036854775808 : 9223372036854775807;
    for (; p < e; p++) {
      const c = load<u8>(p);
      if (c < 0x30 || c > 0x39) return r;
      const d = <u64>(c - 0x30);
      if (v > (limit - d) / 10) return r;
      v = v * 10 + d;
    }
    r.ok = true;
    r.value = neg ? -(<i64>v) : <i64>v;
    return r;
  }
}

/** An integer, if the number is one. */
export class IntResult {
  ok: bool = false;
  value: i64 = 0;
}

/**
 * Reports whether an object key matches a field name as Go's decoder
 * matches them: exactly or case-insensitively, folding as
 * unicode.SimpleFold (so the Kelvin sign matches k, and the long s
 * matches s). name must be ASCII.
 */
export function keyMatches(key: string, name: string): bool {
  if (key.length != name.length) {
    // Only the Kelvin sign and the long s fold to ASCII, each one UTF-16
    // unit, so lengths in units must agree.
    return false;
  }
  for (let i = 0; i < key.length; i++) {
    let c = key.charCodeAt(i);
    if (c == 0x212a) c = 0x4b;
    else if (c == 0x17f) c = 0x53;
    else if (c >= 0x80) return false;
    if (c >= 0x61 && c <= 0x7a) c -= 0x20;
    let n = name.charCodeAt(i);
    if (n >= 0x61 && n <= 0x7a) n -= 0x20;
    if (c != n) return false;
  }
  return true;
}

/** Parses len bytes at src as one JSON value; null if it is not JSON. */
export function parse(src: usize, len: i32): Doc | null {
  const p = new Parser(src, len);
  if (!p.document()) return null;
  p.doc.root = p.rootNode;
  return p.doc;
}

class Parser {
  doc: Doc = new Doc();
  pos: i32 = 0;
  pending: i32[] = [];
  frameNode: i32[] = [];
  frameObject: bool[] = [];
  framePending: i32[] = [];
  rootNode: i32 = -1;
  buf: u8[] = [];

  constructor(public src: usize, public len: i32) {
    this.doc.src = src;
  }

  peek(): i32 {
    return this.pos < this.len ? <i32>load<u8>(this.src + <usize>this.pos) : -1;
  }

  at(i: i32): i32 {
    return i < this.len ? <i32>load<u8>(this.src + <usize>i) : -1;
  }

  ws(): void {
    while (true) {
      const c = this.peek();
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) return;
      this.pos++;
    }
  }

  push(kind: u8, start: i32, text: string): i32 {
    const d = this.doc;
    d.kind.push(kind);
    d.start.push(start);
    d.end.push(this.pos);
    d.text.push(text);
    d.kidsStart.push(0);
    d.kidsLen.push(0);
    return d.kind.length - 1;
  }

  // document parses the whole text; rootNode is its value.
  document(): bool {
    this.ws();
    while (true) {
      // A value starts here.
      const start = this.pos;
      const c = this.peek();
      let done: i32 = -1;
      if (c == 0x7b || c == 0x5b) {
        const object = c == 0x7b;
        this.pos++;
        const node = this.push(object ? KIND_OBJECT : KIND_ARRAY, start, "");
        this.frameNode.push(node);
        this.frameObject.push(object);
        this.framePending.push(this.pending.length);
        if (this.frameNode.length > MAX_DEPTH) return false;
        this.ws();
        if (this.peek() == (object ? 0x7d : 0x5d)) {
          this.pos++;
          done = this.close();
        } else if (object && !this.key()) {
          return false;
        }
      } else if (c == 0x22) {
        const s = this.string();
        if (s == null) return false;
        done = this.push(KIND_STRING, start, s);
      } else if (c == 0x74) {
        done = this.literal("true", KIND_BOOL);
        if (done < 0) return false;
      } else if (c == 0x66) {
        done = this.literal("false", KIND_BOOL);
        if (done < 0) return false;
      } else if (c == 0x6e) {
        done = this.literal("null", KIND_NULL);
        if (done < 0) return false;
      } else if (c == 0x2d || (c >= 0x30 && c <= 0x39)) {
        done = this.number();
        if (done < 0) return false;
      } else {
        return false;
      }
      // After a value: separators and closing brackets.
      while (done >= 0) {
        if (this.frameNode.length == 0) {
          this.ws();
          this.rootNode = done;
          return this.pos == this.len;
        }
        this.pending.push(done);
        this.ws();
        const object = this.frameObject[this.frameObject.length - 1];
        const d = this.peek();
        if (d == 0x2c) {
          this.pos++;
          this.ws();
          if (object && !this.key()) return false;
          done = -1;
        } else if ((object && d == 0x7d) || (!object && d == 0x5d)) {
          this.pos++;
          done = this.close();
        } else {
          return false;
        }
      }
    }
  }

  // key parses an object's key and its colon, leaving the key pending.
  key(): bool {
    if (this.peek() != 0x22) return false;
    const start = this.pos;
    const s = this.string();
    if (s == null) return false;
    this.pending.push(this.push(KIND_STRING, start, s));
    this.ws();
    if (this.peek() != 0x3a) return false;
    this.pos++;
    this.ws();
    return true;
  }

  close(): i32 {
    const node = this.frameNode.pop();
    this.frameObject.pop();
    const from = this.framePending.pop();
    const d = this.doc;
    d.kidsStart[node] = d.kids.length;
    d.kidsLen[node] = this.pending.length - from;
    d.end[node] = this.pos;
    for (let i = from; i < this.pending.length; i++) d.kids.push(this.pending[i]);
    this.pending.length = from;
    return node;
  }

  literal(word: string, kind: u8): i32 {
    const start = this.pos;
    for (let i = 0; i < word.length; i++) {
      if (this.at(start + i) != word.charCodeAt(i)) return -1;
    }
    this.pos += word.length;
    return this.push(kind, start, "");
  }

  digits(): i32 {
    const start = this.pos;
    while (true) {
      const c = this.peek();
      if (c < 0x30 || c > 0x39) break;
      this.pos++;
    }
    return this.pos - start;
  }

  number(): i32 {
    const start = this.pos;
    if (this.peek() == 0x2d) this.pos++;
    const c = this.peek();
    if (c == 0x30) this.pos++;
    else if (c >= 0x31 && c <= 0x39) this.digits();
    else return -1;
    if (this.peek() == 0x2e) {
      this.pos++;
      if (this.digits() == 0) return -1;
    }
    const e = this.peek();
    if (e == 0x65 || e == 0x45) {
      this.pos++;
      const s = this.peek();
      if (s == 0x2b || s == 0x2d) this.pos++;
      if (this.digits() == 0) return -1;
    }
    return this.push(KIND_NUMBER, start, "");
  }

  hex4(at: i32): i32 {
    if (at + 4 > this.len) return -1;
    let n = 0;
    for (let i = 0; i < 4; i++) {
      const c = this.at(at + i);
      let d: i32;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
      else return -1;
      n = n * 16 + d;
    }
    return n;
  }

  // rune appends r to buf as UTF-8.
  rune(r: i32): void {
    const b = this.buf;
    if (r < 0x80) b.push(<u8>r);
    else if (r < 0x800) {
      b.push(<u8>(0xc0 | (r >> 6)));
      b.push(<u8>(0x80 | (r & 0x3f)));
    } else if (r < 0x10000) {
      b.push(<u8>(0xe0 | (r >> 12)));
      b.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
      b.push(<u8>(0x80 | (r & 0x3f)));
    } else {
      b.push(<u8>(0xf0 | (r >> 18)));
      b.push(<u8>(0x80 | ((r >> 12) & 0x3f)));
      b.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
      b.push(<u8>(0x80 | (r & 0x3f)));
    }
  }

  string(): string | null {
    this.pos++; // the opening quote
    const first = this.pos;
    // Fast path: printable ASCII up to the closing quote.
    while (true) {
      const c = this.peek();
      if (c == 0x22) {
        this.pos++;
        return String.UTF8.decodeUnsafe(this.src + <usize>first, <usize>(this.pos - 1 - first));
      }
      if (c < 0x20 || c == 0x5c || c >= 0x80) break;
      this.pos++;
    }
    this.buf.length = 0;
    for (let i = first; i < this.pos; i++) this.buf.push(load<u8>(this.src + <usize>i));
    while (true) {
      const c = this.peek();
      if (c < 0) return null;
      if (c == 0x22) {
        this.pos++;
        return String.UTF8.decodeUnsafe(this.buf.dataStart, <usize>this.buf.length);
      }
      if (c < 0x20) return null;
      if (c == 0x5c) {
        const e = this.at(this.pos + 1);
        if (e < 0) {
          this.pos++;
          return null;
        }
        this.pos += 2;
        if (e == 0x22 || e == 0x5c || e == 0x2f) this.buf.push(<u8>e);
        else if (e == 0x62) this.buf.push(8);
        else if (e == 0x66) this.buf.push(12);
        else if (e == 0x6e) this.buf.push(10);
        else if (e == 0x72) this.buf.push(13);
        else if (e == 0x74) this.buf.push(9);
        else if (e == 0x75) {
          const r = this.hex4(this.pos);
          if (r < 0) return null;
          this.pos += 4;
          if (r >= 0xd800 && r < 0xe000) {
            // A surrogate pairs only with a following \uXXXX low
            // surrogate, as Go's unquote does.
            let lo = -1;
            if (this.at(this.pos) == 0x5c && this.at(this.pos + 1) == 0x75) lo = this.hex4(this.pos + 2);
            if (r < 0xdc00 && lo >= 0xdc00 && lo < 0xe000) {
              this.pos += 6;
              this.rune(0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00));
            } else {
              this.rune(0xfffd);
            }
          } else {
            this.rune(r);
          }
        } else {
          this.pos--;
          return null;
        }
      } else if (c < 0x80) {
        this.buf.push(<u8>c);
        this.pos++;
      } else {
        this.pos += this.utf8(this.pos);
      }
    }
  }

  // utf8 decodes one sequence at i as Go's utf8.DecodeRune, appends it
  // (U+FFFD if invalid) and returns its length (1 if invalid).
  utf8(i: i32): i32 {
    const b0 = this.at(i);
    let n = 0;
    let lo = 0x80;
    let hi = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) n = 2;
    else if (b0 >= 0xe0 && b0 <= 0xef) {
      n = 3;
      if (b0 == 0xe0) lo = 0xa0;
      if (b0 == 0xed) hi = 0x9f;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      n = 4;
      if (b0 == 0xf0) lo = 0x90;
      if (b0 == 0xf4) hi = 0x8f;
    }
    let ok = n > 0;
    for (let k = 1; ok && k < n; k++) {
      const c = this.at(i + k);
      const l = k == 1 ? lo : 0x80;
      const h = k == 1 ? hi : 0xbf;
      if (c < l || c > h) ok = false;
    }
    if (!ok) {
      this.rune(0xfffd);
      return 1;
    }
    for (let k = 0; k < n; k++) this.buf.push(<u8>this.at(i + k));
    return n;
  }
}
