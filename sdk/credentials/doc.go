// Package credentials is what a Pawl client presents to the server, shared
// by the SDK, the file agent and the CLI: a bearer token (given, or read
// from a file that is read again when it changes, so a rotated token is
// picked up without a restart), the CA bundle that signs the server's
// certificate, and a client certificate for mutual TLS (also read again
// when its files change).
//
// A token never travels in clear text beyond this machine: RefuseClearText
// refuses an http:// URL whose host is not loopback (127.0.0.0/8, ::1 or
// "localhost"; names are not resolved, since DNS could point them
// anywhere), and the transport Bearer returns checks every request again
// before it sends it, so neither a later server in a list nor a redirect
// can carry the token elsewhere.
//
// NewToken and HashToken make tokens and their hashes in the format of
// pawld's auth file: a token is "pawl_" followed by 32 random bytes in
// unpadded URL-safe base64, and the file stores only "sha256:" and the
// lowercase hex of the sha256 of the token's bytes.
//
// The package imports the standard library alone, so the server can share
// the token format.
package credentials
