// Package auditchain is the form of Pawl's audit records and the check of
// their chain, shared by the server that writes them and by any client
// that verifies them (pawl audit verify): it imports only the standard
// library.
//
// A record's canonical bytes are its JSON encoding (Record.Canonical),
// fields in the order Record declares them; its hash is "sha256:" and the
// lower-case hex of sha256 over those bytes (Hash). Each record names the
// hash of the record before it (prev_hash, empty for the first) and its
// sequence (1 for the first, then one more each). A log keeps each record
// as one line, "HASH SP CANONICAL LF" (Line, ParseLine, Scan).
//
// Chain checks records in order: each one's bytes must hash to the hash
// beside them, name the hash of the one before, and carry the next
// sequence. A record changed, removed, inserted or moved breaks the chain
// at that point. Records removed from the end leave a shorter chain that
// still holds: compare its head (sequence and hash) with one seen before.
package auditchain
