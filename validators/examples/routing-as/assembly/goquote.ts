// Go's strconv.Quote (what fmt's %q writes for a string), so that messages
// match the Go example's byte for byte.

import { PRINT } from "./isprint";

const HEX = "0123456789abcdef";

/** Quotes s as Go's strconv.Quote does. */
export function quote(s: string): string {
  const parts = new Array<string>();
  parts.push('"');
  for (let i = 0; i < s.length; ) {
    const r = <u32>s.codePointAt(i);
    const w = r >= 0x10000 ? 2 : 1;
    if (r == 0x22 || r == 0x5c) {
      parts.push("\\" + String.fromCharCode(r));
    } else if (r >= 0x20 && r < 0x7f) {
      parts.push(String.fromCharCode(r));
    } else if (r >= 0x80 && isPrint(r)) {
      parts.push(s.substring(i, i + w));
    } else if (r == 7) parts.push("\\a");
    else if (r == 8) parts.push("\\b");
    else if (r == 12) parts.push("\\f");
    else if (r == 10) parts.push("\\n");
    else if (r == 13) parts.push("\\r");
    else if (r == 9) parts.push("\\t");
    else if (r == 11) parts.push("\\v");
    else {
      const digits = r < 0x80 ? 2 : r < 0x10000 ? 4 : 8;
      parts.push(r < 0x80 ? "\\x" : r < 0x10000 ? "\\u" : "\\U");
      for (let k = digits - 1; k >= 0; k--) parts.push(HEX.charAt(<i32>((r >> (4 * k)) & 15)));
    }
    i += w;
  }
  parts.push('"');
  return parts.join("");
}

// isPrint is strconv.IsPrint for r >= 0x80.
function isPrint(r: u32): bool {
  let lo = 0;
  let hi = PRINT.length / 2;
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (PRINT[2 * m + 1] < r) lo = m + 1;
    else if (PRINT[2 * m] > r) hi = m;
    else return true;
  }
  return false;
}
