// Package parity holds the tests that the routing example in Rust
// (validators/examples/routing-rust) and in AssemblyScript
// (validators/examples/routing-as) reach the Go example's verdicts
// (validators/examples/routing): the same validity, the same violations
// (path, message and severity, in order) and the same secrets on every
// input, each module built with its real toolchain and run by
// validators/host as the server and the SDK run it.
//
// The inputs are the files of testdata/, the cases of the Go example
// (validators/examples/routing/cases, if present) and the table in
// parity_test.go; FuzzParity looks for more.
package parity
