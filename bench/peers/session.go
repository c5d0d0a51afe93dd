package main

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// sessionCount is how many SessionService sessions carry pawlSessions'
// watchers: one per connection of the pawl system's.
const sessionCount = 64

// pawlSessions is pawld with its watchers opened on a few sessions, each
// holding many watches, instead of a stream per watcher. Puts and
// catch-up are pawl's. With shared set, the sessions ask for shared
// events (SessionHello.shared_events): a change comes once per session,
// with the IDs of the watches it is for.
type pawlSessions struct {
	*pawl
	shared   bool
	sessions []*benchkit.Session
}

// startPawlSessions returns the starter of pawlSessions, with or
// without shared events.
func startPawlSessions(shared bool) func(ctx context.Context, dir string) (system, error) {
	return func(ctx context.Context, dir string) (system, error) {
		s, err := startPawl(ctx, dir)
		if err != nil {
			return nil, err
		}
		return &pawlSessions{pawl: s.(*pawl), shared: shared}, nil
	}
}

func (s *pawlSessions) name() string {
	if s.shared {
		return fmt.Sprintf("Pawl, watches on %d sessions, shared events", sessionCount)
	}
	return fmt.Sprintf("Pawl, watches on %d sessions (SessionService)", sessionCount)
}

// subscribe opens sessionCount sessions, one per connection, and spreads
// the n watches over them.
func (s *pawlSessions) subscribe(ctx context.Context, n int, deliver func(int)) error {
	var started sync.WaitGroup
	var mu sync.Mutex
	var failed error
	handlers := benchkit.SessionHandlers{Watch: func(m *pawlv1.SessionWatchMessage) {
		switch {
		case m.GetResponse().GetStarted() != nil:
			started.Done()
		case m.GetError() != nil:
			mu.Lock()
			failed = fmt.Errorf("watch %d: %s: %s", m.GetWatchId(), m.GetError().GetCode(), m.GetError().GetMessage())
			mu.Unlock()
			started.Done()
		}
		// A shared message is for watch_id and each of shared_with.
		for _, ev := range m.GetResponse().GetEvents().GetEvents() {
			for range 1 + len(m.GetSharedWith()) {
				deliver(index(ev.GetKv().GetKey()))
			}
		}
	}}
	for k := range min(sessionCount, n) {
		client := pawlv1connect.NewSessionServiceClient(s.h2cs[k%len(s.h2cs)], s.url, connect.WithGRPC())
		sess, err := benchkit.OpenSession(ctx, client, &pawlv1.SessionHello{Instance: &pawlv1.Instance{
			WorkloadIdentity: fmt.Sprintf("peers-%02d", k), BootId: "boot-1", Zone: "zone-a", Role: "watcher", TrafficWeight: 1, AppVersion: "1.0.0",
		}, SharedEvents: s.shared}, handlers)
		if err != nil {
			return err
		}
		s.sessions = append(s.sessions, sess)
	}
	for i := range n {
		started.Add(1)
		if err := s.sessions[i%len(s.sessions)].Watch(int64(i/len(s.sessions)+1), &pawlv1.WatchRequest{Prefix: "/fan/"}); err != nil {
			return err
		}
	}
	started.Wait()
	mu.Lock()
	defer mu.Unlock()
	return failed
}

func (s *pawlSessions) close() {
	for _, sess := range s.sessions {
		sess.Close()
	}
	s.pawl.close()
}
