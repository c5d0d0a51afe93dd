// Package abitest is the conformance kit of validator modules: it checks a
// module against ABI v1 (validators/ABI.md) locally, with the same host
// (validators/host) and the same limits the server applies, without a
// server. `pawl validator test MODULE.wasm --cases DIR` runs it; tests run
// it with Run.
//
// Run reports one named Check per promise, each passed, failed (with why)
// or skipped:
//
//   - the checks of an upload, as the server makes them: the module's size,
//     its format, its shape (host.ModuleLimits), its imports (the allowed
//     WASI subset) and exports (names and signatures), then its loading
//     (compile, instantiate, _initialize) and the ABI version it returns;
//   - the author's cases (LoadCases: inputs with expected verdicts and
//     violations), and built-in inputs that push a module (empty, not the
//     expected format, deeply nested, as large as a server accepts), for
//     which a module must return a verdict rather than fail;
//   - determinism: every input gives the same result on a fresh instance
//     and on a reused one, and after a call that failed;
//   - isolation: on one instance, every input run after all the others,
//     forwards and backwards, gives the result it gives on a fresh one;
//   - the limits: every call within the time limit, an input as large as
//     the memory limit refused with the call's failure (never the host's),
//     every result within the output limit.
//
// A module that passes behaves the same on the server (at upload, dry run
// and release) and on every instance that applies its releases.
package abitest
