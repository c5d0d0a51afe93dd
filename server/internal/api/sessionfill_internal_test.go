package api

import (
	"context"
	"fmt"
	"slices"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// filledSession is a bare session on hub whose writer's role the test
// holds: it calls fill itself, and no writer starts.
func filledSession(t testing.TB, hub *watch.Hub, commands int) *session {
	t.Helper()
	s := bareSession(1)
	s.cmds = make(chan *pawlv1.SessionRequest, commands)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	t.Cleanup(s.cancel)
	s.wstate.Store(writerRunning)
	s.joinHub(hub)
	return s
}

// watchOn opens watch id of prefix from start on s, as the writer's
// create does.
func watchOn(t testing.TB, s *session, id int64, prefix string, start int64) *sessionWatch {
	t.Helper()
	w, err := s.group.Watch(s.ctx, prefix, start)
	if err != nil {
		t.Fatal(err)
	}
	sw := &sessionWatch{id: id, w: w}
	s.watches[id], s.byW[w] = sw, sw
	return sw
}

func cancelRequest(id int64) *pawlv1.SessionRequest {
	return &pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_WatchCancel{WatchCancel: &pawlv1.SessionWatchCancel{WatchId: id}}}
}

// TestAMessageCarriesOutAtMostSessionCommandsRequests: a client can queue
// watch requests as fast as the writer takes them; the writer carries out
// at most sessionCommands for one message and says more are left, so
// that the message is sent (with the ACK answers due) and does not grow
// without bound.
func TestAMessageCarriesOutAtMostSessionCommandsRequests(t *testing.T) {
	_, hub := openHub(t)
	const queued = 2*sessionCommands + 10
	s := filledSession(t, hub, queued) // as if the receiver refilled the queue while the writer took it
	for id := range int64(queued) {
		s.cmds <- cancelRequest(id + 1)
	}
	var counts []int
	for more := true; more; {
		msg := &pawlv1.SessionResponse{}
		var err error
		if more, err = s.fill(msg); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, len(msg.Watches))
	}
	if want := fmt.Sprint([]int{sessionCommands, sessionCommands, 10}); fmt.Sprint(counts) != want {
		t.Fatalf("requests carried out per message: %v, want %s", counts, want)
	}
}

// TestACancelledWatchSendsNothingAfterItsCancellation: a watch with more
// pending than one message holds is left behind for the next; cancelled
// meanwhile, nothing more of it follows the cancellation (its ID may be
// opened again at once, as a client may).
func TestACancelledWatchSendsNothingAfterItsCancellation(t *testing.T) {
	st, hub := openHub(t)
	ctx := context.Background()
	value := make([]byte, 10<<10)
	for i := range 300 { // 3 MB in batches of at most 128 events (a batch is not split): three messages
		if _, err := st.Put(ctx, store.Put{Key: fmt.Sprintf("/a/%03d", i), Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	s := filledSession(t, hub, sessionCommands)
	sw := watchOn(t, s, 5, "/a/", 1)
	w := sw.w
	// Another watch of the prefix, current: the hub goes on tracking the
	// prefix when watch 5 closes (alone, a closed watcher's prefix is
	// forgotten, and its polls find nothing).
	watchOn(t, s, 6, "/a/", 0)
	first := &pawlv1.SessionResponse{}
	if more, err := s.fill(first); err != nil || !more || !slices.Contains(s.behind, sw) || len(first.GetWatches()) == 0 {
		t.Fatalf("first message: %d watch messages, more %v, watch 5 behind %v, %v; want some of /a/ and the rest behind",
			len(first.GetWatches()), more, slices.Contains(s.behind, sw), err)
	}
	s.cmds <- cancelRequest(5)
	cancelled := false
	var err error
	for more := true; more; {
		msg := &pawlv1.SessionResponse{}
		if more, err = s.fill(msg); err != nil {
			t.Fatal(err)
		}
		for _, wm := range msg.GetWatches() {
			switch {
			case wm.GetWatchId() == 5 && wm.GetCanceled():
				cancelled = true
			case wm.GetResponse().GetEvents() != nil: // watch 6 started after the puts: none of its own
				t.Fatalf("events of watch %d (%d of them) after watch 5's cancellation", wm.GetWatchId(), len(wm.GetResponse().GetEvents().GetEvents()))
			}
		}
	}
	if !cancelled || s.watches[5] != nil || s.byW[w] != nil {
		t.Fatalf("after the cancellation: cancelled %v, watch 5 open %v", cancelled, s.watches[5] != nil || s.byW[w] != nil)
	}
}

// BenchmarkAMessageOfProgressRequests: one message's worth of progress
// requests (sessionCommands of them, queued at once) on a session with
// 1,000 watches (as many as LIMITS.md lets one session open). Each
// request asks every watch; the writer carries them out once per message.
func BenchmarkAMessageOfProgressRequests(b *testing.B) {
	_, hub := openHub(b)
	s := filledSession(b, hub, sessionCommands)
	for id := range int64(1000) {
		watchOn(b, s, id+1, fmt.Sprintf("/w/%d/", id), 0)
	}
	progress := &pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_ProgressRequest{ProgressRequest: &pawlv1.SessionProgressRequest{}}}
	msg := &pawlv1.SessionResponse{}
	b.ReportAllocs()
	for b.Loop() {
		for range sessionCommands {
			s.cmds <- progress
		}
		for more := true; more; {
			msg.Reset()
			var err error
			if more, err = s.fill(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}
