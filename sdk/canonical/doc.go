// Package canonical computes the canonical content digest of a release, as
// CANONICAL.md in this directory specifies: sha256 over a documented byte
// form of the content, so that every SDK, in any language, computes the same
// digest. The test vectors in testdata/vectors.json are the contract; other
// implementations check themselves against the same file.
//
// It imports only the standard library: the server and the Go SDK share it,
// so they cannot disagree on a digest.
package canonical
