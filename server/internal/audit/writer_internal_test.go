package audit

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// TestWriterAsyncContextAndStop: an append whose context ends while it
// waits in the queue is answered at once and never committed; one whose
// context ends while its batch commits is answered at once, saying it
// may still be written; appends still queued when the writer stops are
// answered ErrClosed; each done is called once.
func TestWriterAsyncContextAndStop(t *testing.T) {
	committing := make(chan []string, 4) // the request IDs of each batch, as it starts
	proceed := make(chan struct{})
	w := startWriter(1, func(_ context.Context, batch []*pending) error {
		var ids []string
		for _, p := range batch {
			ids = append(ids, p.rec.RequestID)
		}
		committing <- ids
		<-proceed
		return nil
	})
	answers := make(chan string, 8)
	appendAsync := func(ctx context.Context, id string) {
		w.appendAsync(ctx, auditchain.Record{RequestID: id}, func(r auditchain.Record, err error) {
			if err != nil {
				answers <- id + ": " + err.Error()
				return
			}
			answers <- id + ": ok " + r.RequestID
		})
	}
	inBatch, cancelInBatch := context.WithCancel(context.Background())
	queued, cancelQueued := context.WithCancel(context.Background())
	appendAsync(inBatch, "a") // taken into the first batch, which waits
	if ids := <-committing; strings.Join(ids, ",") != "a" {
		t.Fatalf("first batch %v", ids)
	}
	appendAsync(queued, "b")
	appendAsync(context.Background(), "c")
	cancelQueued()
	if got := <-answers; got != "b: audit: waiting to append: context canceled" {
		t.Fatalf("an append whose context ended in the queue: %q", got)
	}
	cancelInBatch()
	if got := <-answers; got != "a: audit: waiting for the append to be durable: context canceled" {
		t.Fatalf("an append whose context ended while its batch commits: %q", got)
	}
	proceed <- struct{}{} // a's batch ends: its answer was given already
	if ids := <-committing; strings.Join(ids, ",") != "c" {
		t.Fatalf("second batch %v: b, cancelled in the queue, must not be written", ids)
	}
	appendAsync(context.Background(), "d") // queued behind c when the writer stops
	w.cancel()                             // stop, in two steps: c's batch ends after the writer is told to stop
	proceed <- struct{}{}
	w.stop()
	got := []string{<-answers, <-answers}
	if got[0] != "c: ok c" || got[1] != "d: "+ErrClosed.Error() {
		t.Fatalf("at stop: %q, want c written and d refused", got)
	}
	var err error
	w.appendAsync(context.Background(), auditchain.Record{}, func(_ auditchain.Record, e error) { err = e })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("after stop: %v", err)
	}
	select {
	case extra := <-answers:
		t.Fatalf("an append answered twice: %q", extra)
	default:
	}
}
