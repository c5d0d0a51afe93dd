// Package sharedgzip is a gzip compressor for Connect handlers that
// compresses each distinct message once, however many streams send it:
// when a change fans out to thousands of watch streams, each stream
// marshals the same bytes, and compressing them again for every stream
// was most of the server's CPU. The compressor keeps the most recently
// compressed messages that several streams sent, and their gzip output; a
// message it keeps is answered from there, and one being compressed by
// another stream is waited for rather than compressed again. A message
// sent once (the answer to a unary call, a session's own message) is not
// kept: only its key is remembered, and it is kept if it comes again. The
// output is the standard library's gzip at the default level, byte for
// byte.
package sharedgzip
