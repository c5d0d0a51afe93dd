// The routing-policy example validator (validators/examples/routing) in
// AssemblyScript, verdict for verdict and message for message with the Go
// one: an upstream routing table whose weights must sum to 100 and whose
// hosts must be unique.
//
//   {"upstreams": [{"host": "a.internal:443", "weight": 60}, {"host": "b.internal:443", "weight": 40}]}
//
// An upstream may carry a "token" of at least 16 bytes; every token is
// marked secret. The table is decoded with Go's encoding/json rules
// (case-insensitive keys, the last duplicate wins, a repeated array decodes
// into the elements of the one before it, integers only as integer
// literals), which is what the Go example does.
//
// Build (from the repository's root, after npm ci):
//   npx asc validators/examples/routing-as/assembly/index.ts --config validators/examples/routing-as/asconfig.json --target release

import { handle, Input, Verdict, parse, Doc, keyMatches, goName, KIND_NULL, KIND_NUMBER, KIND_STRING, KIND_ARRAY, KIND_OBJECT } from "../../../guest-as/assembly/index";
import { quote } from "./goquote";

export { pawl_abi_version, pawl_alloc, pawl_validate } from "../../../guest-as/assembly/index";


class Upstream {
  host: string = "";
  hasWeight: bool = false;
  weight: i64 = 0;
  token: string = "";
}

// What a field must be, in a type error.
enum Want {
  Object,
  Array,
  Int,
  String,
}

// Decoder decodes a document into the upstreams as Go's json.Unmarshal
// decodes it into the Go example's struct, stopping at the first type
// error (the only one Go reports); error is then its message.
class Decoder {
  error: string | null = null;
  // slots is the slice's backing array: Go decodes a repeated "upstreams"
  // array into the elements it already has.
  slots: Upstream[] = [];
  len: i32 = 0;

  constructor(public doc: Doc) {}

  wrong(field: string, value: string, want: Want): void {
    const place = field.length == 0 ? "the config" : field;
    if (want == Want.Object && field.length > 0) {
      this.error = "not a routing table: " + place + " must hold objects, not " + value;
      return;
    }
    const w = want == Want.Object ? "an object" : want == Want.Array ? "an array" : want == Want.Int ? "an integer" : "a string";
    this.error = "not a routing table: " + place + " must be " + w + ", not " + value;
  }

  table(): void {
    const d = this.doc;
    const root = d.root;
    const k = d.kind[root];
    if (k == KIND_NULL) return;
    if (k != KIND_OBJECT) {
      this.wrong("", goName(k), Want.Object);
      return;
    }
    const n = d.count(root);
    for (let i = 0; i < n; i++) {
      if (!keyMatches(d.key(root, i), "upstreams")) continue;
      const v = d.value(root, i);
      const vk = d.kind[v];
      if (vk == KIND_NULL) {
        this.slots.length = 0;
        this.len = 0;
      } else if (vk == KIND_ARRAY) {
        const m = d.count(v);
        this.len = 0;
        for (let j = 0; j < m; j++) {
          if (this.len == this.slots.length) this.slots.push(new Upstream());
          this.upstream(d.item(v, j), this.slots[this.len]);
          if (this.error != null) return;
          this.len++;
        }
        if (this.len == 0) this.slots.length = 0;
      } else {
        this.wrong("upstreams", goName(vk), Want.Array);
        return;
      }
    }
  }

  upstream(v: i32, u: Upstream): void {
    const d = this.doc;
    const k = d.kind[v];
    if (k == KIND_NULL) return;
    if (k != KIND_OBJECT) {
      this.wrong("upstreams", goName(k), Want.Object);
      return;
    }
    const n = d.count(v);
    for (let i = 0; i < n; i++) {
      const key = d.key(v, i);
      const f = d.value(v, i);
      const fk = d.kind[f];
      if (keyMatches(key, "host") || keyMatches(key, "token")) {
        const isHost = keyMatches(key, "host");
        if (fk == KIND_STRING) {
          if (isHost) u.host = d.text[f];
          else u.token = d.text[f];
        } else if (fk != KIND_NULL) {
          this.wrong(isHost ? "upstreams.host" : "upstreams.token", goName(fk), Want.String);
          return;
        }
      } else if (keyMatches(key, "weight")) {
        if (fk == KIND_NULL) {
          u.hasWeight = false;
        } else if (fk == KIND_NUMBER) {
          const r = d.int(f);
          if (!r.ok) {
            this.wrong("upstreams.weight", "number " + d.raw(f), Want.Int);
            return;
          }
          u.hasWeight = true;
          u.weight = r.value;
        } else {
          this.wrong("upstreams.weight", goName(fk), Want.Int);
          return;
        }
      }
    }
  }
}

function fail(msg: string): Verdict {
  const v = new Verdict();
  v.error("", msg);
  return v;
}

function validate(input: Input): Verdict {
  const doc = parse(input.configPtr, input.configLen);
  if (doc == null) return fail("not a routing table: invalid JSON");
  const dec = new Decoder(doc);
  dec.table();
  if (dec.error != null) return fail(<string>dec.error);
  const res = new Verdict();
  const n = dec.len;
  if (n == 0) res.error("/upstreams", "at least one upstream is required");
  const seen = new Map<string, i32>();
  let sum: i64 = 0;
  for (let i = 0; i < n; i++) {
    const u = dec.slots[i];
    const path = "/upstreams/" + i.toString();
    if (u.host.length == 0) {
      res.error(path + "/host", "host is required");
    } else if (seen.has(u.host)) {
      res.error(path + "/host", "host " + quote(u.host) + " is also upstream " + seen.get(u.host).toString() + "; hosts must be unique");
    } else {
      seen.set(u.host, i);
    }
    if (u.token.length > 0) {
      res.secret(path + "/token");
      if (String.UTF8.byteLength(u.token) < 16) {
        res.error(path + "/token", "token " + quote(u.token) + " is shorter than 16 characters");
      }
    }
    if (!u.hasWeight) {
      res.error(path + "/weight", "weight is required");
    } else if (u.weight < 0 || u.weight > 100) {
      res.error(path + "/weight", "weight " + u.weight.toString() + " is outside 0..100");
    } else {
      sum += u.weight;
    }
  }
  if (n > 0 && sum != 100) res.error("/upstreams", "weights sum to " + sum.toString() + "; they must sum to 100");
  return res;
}

// Registered last: top-level statements run in order at instantiation.
handle(validate);
