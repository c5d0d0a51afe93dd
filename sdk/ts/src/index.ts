// The Pawl TypeScript client: a thin layer on the code buf generates from
// proto/ into gen/ts (connect-es v2). See README.md in this directory.

export { DOMAIN, CanonicalError, baseMediaType, canonicalForm, contentDigest, isJSON } from "./canonical.js";
export { DEFAULT_DOWNLOAD_ATTEMPTS, Follower, follow, type FollowEvent, type FollowOptions, type Snapshot } from "./follow.js";
export { childTraceparent, newTraceId, traceIdOf } from "./traceparent.js";
export { bearer, createTransport, type TransportOptions } from "./transport.js";
