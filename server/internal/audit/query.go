package audit

import (
	"context"
	"time"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// Query selects records of a log. Empty fields select everything.
type Query struct {
	Principal string
	ConfigID  string
	// Since and Until bound the record's time, both included.
	Since, Until time.Time
	// Outcome is OutcomeOK, OutcomeFailed, OutcomeRefused, or a Connect
	// code's name ("permission_denied").
	Outcome string
	// After is where the listing continues.
	After Cursor
	// Limit is how many records to return at most.
	Limit int
}

const (
	// OutcomeFailed selects every call that did not succeed.
	OutcomeFailed = "failed"
	// OutcomeRefused selects the calls refused as unauthenticated or not
	// permitted.
	OutcomeRefused = "refused"
)

// maxScan bounds how many records one List reads: a selective query over
// a long log answers with fewer records (even none) and a cursor to go on
// from, rather than reading the whole log in one call.
const maxScan = 10_000

// readChunk is how many records List reads from the log at a time.
const readChunk = 512

// List returns the records of log that q selects, as stored, in log
// order, and the cursor to continue from; done says the log has no more
// records after it (now). A record whose bytes do not decode is returned
// whatever the query: it cannot be judged, and hiding it would hide an
// edit.
func List(ctx context.Context, log Log, q Query) (records []auditchain.Stored, next Cursor, done bool, err error) {
	next = q.After
	for scanned := 0; scanned < maxScan; {
		chunk, err := log.Read(ctx, next, min(readChunk, maxScan-scanned))
		if err != nil {
			return nil, q.After, false, err
		}
		if len(chunk) == 0 {
			return records, next, true, nil
		}
		for _, e := range chunk {
			next = e.Next
			if q.matches(e.Stored) {
				records = append(records, e.Stored)
				if len(records) == q.Limit {
					return records, next, false, nil
				}
			}
		}
		scanned += len(chunk)
	}
	return records, next, false, nil
}

func (q Query) matches(s auditchain.Stored) bool {
	r, err := auditchain.Decode(s.Canonical)
	if err != nil {
		return true
	}
	if (q.Principal != "" && r.Principal != q.Principal) || (q.ConfigID != "" && r.Subject.ConfigID != q.ConfigID) {
		return false
	}
	if !q.Since.IsZero() || !q.Until.IsZero() {
		t, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			return true
		}
		if (!q.Since.IsZero() && t.Before(q.Since)) || (!q.Until.IsZero() && t.After(q.Until)) {
			return false
		}
	}
	switch q.Outcome {
	case "":
		return true
	case OutcomeFailed:
		return r.Outcome != auditchain.OutcomeOK
	case OutcomeRefused:
		return r.Outcome == "unauthenticated" || r.Outcome == "permission_denied"
	default:
		return r.Outcome == q.Outcome
	}
}
