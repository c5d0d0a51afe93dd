// Package sdk is Pawl's Go SDK: what a service instance runs to receive
// configuration releases safely.
//
// A Client registers the instance (workload identity, zone, role, traffic
// weight, app version, labels), holds its lease, and applies each config
// generation the server assigns to it:
//
//  1. download the release's content and, by digest, its validator module
//     (from the cache directory when they are there);
//  2. verify the canonical content digest (package canonical) and the
//     module's sha256 against the assignment;
//  3. run the validator locally, in the same sandbox the server used
//     (validators/host), on the input validators/ABI.md defines;
//  4. stage an immutable Snapshot and swap it in atomically;
//  5. hold it for the release's health window while the application's
//     health check and the measured error rate and p99 say healthy;
//  6. while it is a canary whose rollout can still stop (not yet
//     promoted, stopped or replaced, as the assignment stream says), keep
//     checking both every health interval (WithHealthInterval).
//
// After each step it reports an ACK (DISCOVERED, DOWNLOADED, VALIDATED,
// STAGED, APPLIED, HEALTHY_ACKED, or REJECTED with the reason) carrying the
// W3C trace context of a span around that step. A failure after the
// window (the health check fails, or the stage's error-rate or p99 budget
// is broken) is reported at once, as an unhealthy HEALTHY_ACKED of the
// same apply, and so is the application's own finding, ReportUnhealthy:
// either counts against the canary's stage and can stop the rollout. Nothing unverified is ever
// visible: Config returns only snapshots that passed every check. An
// instance applies only what it is assigned, never a higher generation it
// has seen, and never moves to a lower pointer epoch. A shadow assignment
// is validated and reported, never applied.
//
// A Client speaks to the server on one session (SessionService.Session, a
// bidirectional stream): its registration and lease, its assignments, its
// ACKs (each answered on the stream with the record the server stored)
// and the watches of all its spaces, each with an ID, travel on it. When
// the session breaks, the next one resumes all of it: the registration
// (or a new one, when the server no longer knows it), the assignments
// after the last revision taken, each space from its revision, and every
// ACK not yet answered, sent again with its report ID (unique in the
// boot), so that the server answers one it recorded with that record and
// never counts it twice. Against an older server, which answers the
// session Unimplemented, the client falls back by itself to the unary
// calls and streams (Register, WatchAssignments, RolloutService.Ack,
// KVService.Watch), with the same guarantees, and remembers the answer
// for that server (given several, it asks each one it moves to).
// WithoutSession forces those calls; a client WithoutAssignments speaks
// for no instance and watches its spaces by KVService.Watch.
//
// Reads are lock-free: Config returns the current snapshot, JSON decodes
// it once per generation, and OnChange, Watch and Changes report swaps
// (callbacks on a goroutine of the client's, outside its locks; channels
// latest-wins, closed by their context, their stop function or Close).
// For the length of one request, Pin fixes the snapshot of every config,
// so one request never mixes two generations; Middleware and Interceptor
// pin every request they serve, honour the pins of upstream callers (the
// PinHeader), refuse a pin to a generation the instance does not have
// (HTTP 409, Connect FailedPrecondition), and measure the outcomes that
// health windows report; ReportOutcome feeds them from servers they do
// not wrap. Client.Pinned reads the pin, or the current snapshot when
// the request is not pinned. PinTransport and Interceptor forward pins
// downstream.
//
// Status says, for a readiness probe, whether the client is registered
// and connected, its last failure and each applied config's generation
// and age. A lost connection is a Connect Unavailable error wrapping
// ErrConnectionLost wherever it shows; an outage is logged once, then
// paced, and its end once.
//
// Space follows a KV prefix (thousands of small keys, only changed keys
// travel) with lock-free reads, through reconnects and compaction.
//
// Value and Lookup read one value of a config (a Client's current
// snapshot, a pinned Snapshot, or a key of a Space relative to its
// prefix) by JSON pointer or dotted path, as the caller's type, with a
// default. A REJECTED ACK carries a reject code and the validator's
// violations as structured data, cut to the server's bounds.
// Connection and OnConnection tell whether the session (or the
// assignment stream) is up;
// WithMeterProvider records OpenTelemetry metrics (the Metric*
// constants). Package sdk/openfeature is an OpenFeature provider on a
// Client.
//
// With a cache directory, verified releases, validator modules, their
// compiled code and space snapshots are kept on disk (mode 0700, files
// 0600, every file through an os.Root), so a process that starts while the
// server is down starts from its last known good state, verified by digest
// and validated again by its validator. The cache is not its own
// authority: once the server answers, a cached release is used only if it
// has the digests the assignment names. Config IDs and generations from
// the network are checked with sdk/configid before any becomes a path.
//
// Credentials (WithAuthToken, WithAuthTokenFile, WithCAFile,
// WithClientCertificate) go with every call; package credentials holds
// them, and refuses to send a token in clear text to a server beyond
// loopback.
//
// Package pawlerr reads the details of the server's errors (the limit
// that was hit, a key's revision after a failed compare-and-swap, the
// violations of rejected content, the pointer after a lost race) for the
// programs that call the API directly; docs/ERRORS.md lists them.
//
// The package imports no server code: its dependencies are the generated
// API (gen), validators/host, sdk/canonical, sdk/appversion, sdk/configid and sdk/credentials, connect,
// and OpenTelemetry's API.
package sdk
