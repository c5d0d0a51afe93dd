// What the Go harness (../ts_test.go) passes to the node tests.

import { createClient, type Transport } from "@connectrpc/connect";
import { KVService } from "../../../gen/ts/pawl/v1/kv_pb.js";
import { createTransport, type TransportOptions } from "../src/index.js";

function need(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === "") {
    throw new Error(`${name} is not set: run these tests through go test ./sdk/ts/`);
  }
  return v;
}

export const env = {
  /** The pawld's URL. */
  get url() {
    return need("PAWL_URL");
  },
  /** A man in the middle in front of pawld that changes every release's content on its way. */
  get tamperUrl() {
    return need("PAWL_TAMPER_URL");
  },
  get adminToken() {
    return need("PAWL_ADMIN_TOKEN");
  },
  get instanceToken() {
    return need("PAWL_INSTANCE_TOKEN");
  },
  /** The routing validator's digest, uploaded by the harness. */
  get validatorDigest() {
    return need("PAWL_VALIDATOR_DIGEST");
  },
  /** sdk/canonical/testdata/vectors.json. */
  get vectors() {
    return need("PAWL_VECTORS");
  },
};

/** operator returns a transport with the admin token. */
export function operator(opts: TransportOptions = {}): Transport {
  return createTransport(env.url, { token: env.adminToken, ...opts });
}

/**
 * awaitKV checks cond now and after every change under prefix until it
 * holds, as the Go SDK's harness does; signal bounds the wait.
 */
export async function awaitKV(prefix: string, cond: () => Promise<boolean>, signal: AbortSignal): Promise<void> {
  const kv = createClient(KVService, operator());
  const ctl = new AbortController();
  const stop = () => ctl.abort(signal.reason);
  signal.addEventListener("abort", stop);
  const stream = kv.watch({ prefix }, { signal: ctl.signal })[Symbol.asyncIterator]();
  try {
    await stream.next(); // started: changes after it are seen
    while (!(await cond())) {
      const r = await stream.next();
      if (r.done) {
        throw new Error(`the watch of ${prefix} ended`);
      }
    }
  } finally {
    signal.removeEventListener("abort", stop);
    ctl.abort();
    await stream.return?.();
  }
}
