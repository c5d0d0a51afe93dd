package main_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
)

// replicas starts n pawld processes sharing one store in the shared Redis
// under a new prefix.
func replicas(t *testing.T, n int, extra ...string) []*pawldtest.Process {
	t.Helper()
	_, prefix := redistest.Shared(t)
	return pawldtest.Replicas(t, n, prefix, extra...)
}

// kvClient is a gRPC KV client of url over its own HTTP/2 connection.
func kvClient(t *testing.T, url string) pawlv1connect.KVServiceClient {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	return pawlv1connect.NewKVServiceClient(&http.Client{Transport: tr}, url, connect.WithGRPC())
}

// watcher follows a prefix from revision 1 over a list of replicas: when
// its stream breaks it resumes on the next replica from the revision after
// the last it saw, as a client given several servers does.
type watcher struct {
	clients []pawlv1connect.KVServiceClient
	at      int
	mu      sync.Mutex
	revs    []int64
	resumes int
}

func (w *watcher) run(ctx context.Context, prefix string, want int64) error {
	for {
		w.mu.Lock()
		next := int64(1)
		if n := len(w.revs); n > 0 {
			next = w.revs[n-1] + 1
		}
		w.mu.Unlock()
		if next > want {
			return nil
		}
		stream, err := w.clients[w.at%len(w.clients)].Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix, StartRevision: next}))
		if err == nil {
			for stream.Receive() {
				w.mu.Lock()
				for _, ev := range stream.Msg().GetEvents().GetEvents() {
					w.revs = append(w.revs, ev.GetKv().GetModRevision())
				}
				done := len(w.revs) > 0 && w.revs[len(w.revs)-1] >= want
				w.mu.Unlock()
				if done {
					_ = stream.Close()
					return nil
				}
			}
			err = stream.Err()
			_ = stream.Close()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("watch ended at %d of %d: %w", next-1, want, ctx.Err())
		}
		w.mu.Lock()
		w.resumes++
		w.at++
		w.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // a client's backoff before it reconnects
	}
}

// check says whether the watcher saw exactly 1..want in order.
func (w *watcher) check(want int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if int64(len(w.revs)) != want {
		return fmt.Errorf("saw %d revisions, want %d", len(w.revs), want)
	}
	for i, r := range w.revs {
		if r != int64(i+1) {
			return fmt.Errorf("revision %d at position %d", r, i)
		}
	}
	return nil
}

// TestThreeReplicasThousandWatchers: writes sent to any of three replicas
// reach each of 1,000 watchers spread over them, every revision once, in
// order. Midway, one replica is killed with SIGKILL: its watchers resume
// on the others from their last revision, and miss nothing.
func TestThreeReplicasThousandWatchers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three pawld processes")
	}
	reps := replicas(t, 3)
	clients := make([]pawlv1connect.KVServiceClient, len(reps))
	for i, r := range reps {
		clients[i] = kvClient(t, r.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const watchers, writes = 1000, 200
	ws := make([]*watcher, watchers)
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	for i := range ws {
		order := []pawlv1connect.KVServiceClient{clients[i%3], clients[(i+1)%3], clients[(i+2)%3]}
		ws[i] = &watcher{clients: order}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ws[i].run(ctx, "/fan/", writes); err != nil {
				errs <- fmt.Errorf("watcher %d: %w", i, err)
			}
		}()
	}
	for i := 1; i <= writes; i++ {
		if i == writes/2 {
			reps[0].Kill()
		}
		to := clients[i%3]
		if i >= writes/2 && i%3 == 0 {
			to = clients[1] // replica 0 is gone
		}
		resp, err := to.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/fan/%04d", i), Value: []byte("v")}))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if resp.Msg.GetRevision() != int64(i) {
			t.Fatalf("write %d got revision %d", i, resp.Msg.GetRevision())
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	resumed := 0
	for i, w := range ws {
		if err := w.check(writes); err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
		if w.resumes > 0 {
			resumed++
		}
	}
	if resumed < watchers/3 {
		t.Fatalf("only %d watchers resumed after the kill; the kill hit no stream", resumed)
	}
	t.Logf("%d watchers resumed on another replica after the kill", resumed)
}
