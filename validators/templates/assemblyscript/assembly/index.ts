// __NAME__ is a Pawl validator: a WebAssembly module that decides whether a
// config may be released (ABI v1). This one checks a service config such as
//
//   {"owner": "team-payments", "replicas": 3}
//
// Build: npm run build        (asc, with asconfig.json: __NAME__.wasm)
// Test:  pawl validator test __NAME__.wasm --cases cases

import { handle, Input, Verdict, parse, goName, KIND_NULL, KIND_STRING, KIND_OBJECT } from "../pawl-guest/assembly/index";

export { pawl_abi_version, pawl_alloc, pawl_validate } from "../pawl-guest/assembly/index";

// validate is called once per validation, with the config's content, its
// media type, its name and the validator's parameters. An instance serves
// one call at a time and is reused: keep no state between calls that
// changes a verdict.
function validate(input: Input): Verdict {
  const v = new Verdict();
  const doc = parse(input.configPtr, input.configLen);
  if (doc == null) {
    v.error("", "not a JSON service config: invalid JSON");
    return v;
  }
  const root = doc.root;
  if (doc.kind[root] != KIND_OBJECT) {
    v.error("", "not a JSON service config: the config is " + goName(doc.kind[root]) + ", not an object");
    return v;
  }
  let owner = -1;
  let replicas = -1;
  for (let i = 0; i < doc.count(root); i++) {
    const key = doc.key(root, i);
    if (key == "owner") owner = doc.value(root, i);
    else if (key == "replicas") replicas = doc.value(root, i);
  }
  if (owner < 0 || doc.kind[owner] != KIND_STRING || doc.text[owner].length == 0) {
    v.error("/owner", "owner is required");
  }
  if (replicas < 0 || doc.kind[replicas] == KIND_NULL) {
    v.error("/replicas", "replicas is required");
  } else {
    const n = doc.int(replicas);
    if (!n.ok) v.error("/replicas", "replicas must be an integer");
    else if (n.value < 1 || n.value > 100) v.error("/replicas", "replicas " + n.value.toString() + " is outside 1..100");
    else if (n.value == 1) v.warning("/replicas", "a single replica has no redundancy");
  }
  // Any violation but a warning makes the verdict invalid.
  return v;
}

handle(validate);
