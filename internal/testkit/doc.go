// Package testkit holds, in its subpackages, what Pawl's tests share and
// nothing that ships: a real server on loopback (testserver), pawld built
// and run as a process (pawldtest), private redis-servers (redistest),
// proxies that hold back, cut, lose or rewrite traffic (faultproxy), a
// clock moved by hand (testclock), the example validators built from
// source (wasmbuild), hand-encoded hostile modules (wasmgen), a
// throwaway PKI (testtls) and what this process's goroutines are doing
// (goroutines). Everything under internal/ outside testkit is
// code the binaries and the SDK use.
package testkit
