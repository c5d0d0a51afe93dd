package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// change is one change of the store, as a test made it.
type change struct {
	key string
	rev int64
}

// changes makes puts (one key) and transactions (several), and keeps
// what it made in revision order.
type changes struct {
	t    *testing.T
	ctx  context.Context
	kv   pawlv1connect.KVServiceClient
	all  []change
	txns [][]change
}

func (c *changes) put(key string) {
	c.t.Helper()
	c.all = append(c.all, change{key, put(c.t, c.kv, key, "v")})
}

// txn makes one transaction of keys: their revisions are consecutive,
// the last one the transaction's.
func (c *changes) txn(keys ...string) {
	c.t.Helper()
	var ops []*pawlv1.TxnOp
	for _, k := range keys {
		ops = append(ops, &pawlv1.TxnOp{Key: k, Value: []byte("v")})
	}
	resp, err := c.kv.Txn(c.ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: ops}))
	if err != nil {
		c.t.Fatal(err)
	}
	var txn []change
	for i, k := range keys {
		txn = append(txn, change{k, resp.Msg.GetRevision() - int64(len(keys)-1-i)})
	}
	c.all = append(c.all, txn...)
	c.txns = append(c.txns, txn)
}

// under is what a watch of prefix from revision from must get, as
// "key=v@rev".
func (c *changes) under(prefix string, from int64) []string {
	var out []string
	for _, ch := range c.all {
		if strings.HasPrefix(ch.key, prefix) && ch.rev >= from {
			out = append(out, fmt.Sprintf("%s=v@%d", ch.key, ch.rev))
		}
	}
	return out
}

// TestSessionSharesEventsAmongItsWatches: a session that asks for shared
// events gets a change once for the watches that get exactly it, and
// each watch still gets exactly its own events (those under its prefix,
// from its start revision), each once, in order, a transaction in one
// message: watches of one prefix, of a prefix under it, of another
// prefix, started now or at a revision in the past (older than the
// watch ring: their history comes from the change log), over history,
// live puts and transactions that touch several prefixes. A session that does
// not ask gets a message per watch, as before.
func TestSessionSharesEventsAmongItsWatches(t *testing.T) {
	for _, shared := range []bool{true, false} {
		for _, proto := range streamProtocols {
			t.Run(fmt.Sprintf("%s/shared=%v", proto.name, shared), func(t *testing.T) {
				// A ring of 8 events: the watches that start in the past
				// read their history from the change log.
				srv := testserver.Start(t, server.WithWatchRing(8))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c := &changes{t: t, ctx: ctx, kv: newKV(t, srv)}
				c.put("/m/a/1")
				c.put("/m/b/1")
				from := c.all[len(c.all)-1].rev // where the watches of the past start
				c.txn("/m/a/h", "/m/b/h", "/n/h")
				c.put("/n/1")
				for i := range 20 {
					c.put(fmt.Sprintf("/m/%c/%d", 'a'+i%2, 10+i))
				}

				s := openSession(t, ctx, testserver.HTTPClient(t), srv.URL, &pawlv1.SessionHello{Instance: instanceOf("pay-1"), SharedEvents: shared}, proto.opts...)
				log := newWatchLog()
				log.add(s.recv())
				watches := []struct {
					prefix string
					start  int64
				}{1: {"/m/", 0}, 2: {"/m/", 0}, 3: {"/m/a/", 0}, 4: {"/m/", from}, 5: {"/m/a/", from}, 6: {"/n/", 0}, 7: {"/m/", from}}
				for id, w := range watches[1:] {
					s.watch(int64(id+1), w.prefix, w.start)
				}
				s.until(log, func() bool { return len(log.started) == len(watches)-1 })

				c.txn("/m/a/t", "/m/b/t", "/n/t")
				c.put("/m/a/3")
				c.put("/m/b/2")
				c.put("/n/2")
				c.txn("/m/a/u", "/m/a/v")
				c.txn("/m/a/end", "/n/end") // each watch's last event

				want := map[int64][]string{}
				for id, w := range watches[1:] {
					start := w.start
					if start == 0 {
						start = log.started[int64(id+1)].GetRevision() + 1
					}
					want[int64(id+1)] = c.under(w.prefix, start)
				}
				s.until(log, func() bool {
					for id, evs := range want {
						if got := log.events[id]; len(got) == 0 || got[len(got)-1] != evs[len(evs)-1] {
							return false
						}
					}
					return true
				})
				for id, evs := range want {
					if !slices.Equal(log.events[id], evs) {
						t.Errorf("watch %d (%s from %d) got\n%v\nwant\n%v", id, watches[id].prefix, watches[id].start, log.events[id], evs)
					}
					// A transaction's events under the prefix travel in one
					// message.
					for _, txn := range c.txns {
						var revs []string
						for _, ch := range txn {
							if strings.HasPrefix(ch.key, watches[id].prefix) && slices.Contains(evs, fmt.Sprintf("%s=v@%d", ch.key, ch.rev)) {
								revs = append(revs, fmt.Sprint(ch.rev))
							}
						}
						if len(revs) > 0 && !slices.ContainsFunc(log.batches[id], func(b string) bool {
							return strings.Contains(","+b+",", ","+strings.Join(revs, ",")+",")
						}) {
							t.Errorf("watch %d: the transaction %v split over %v", id, revs, log.batches[id])
						}
					}
				}
				if srv.Server.WatchStats().LogCatchUps == 0 {
					t.Error("no watch read the change log: the test did not test the catch-up")
				}
				if len(log.wrong) > 0 {
					t.Errorf("malformed shared messages: %v", log.wrong)
				}
				switch {
				case shared && log.shared == 0:
					t.Error("no message was shared among watches")
				case !shared && log.shared > 0:
					t.Errorf("%d messages shared on a session that did not ask", log.shared)
				}
				t.Logf("%d shared messages", log.shared)
			})
		}
	}
}
