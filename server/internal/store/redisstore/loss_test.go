package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestMeasureLossPerKill measures how many acknowledged writes a SIGKILL
// of redis-server loses, per appendfsync setting, over
// $PAWL_MEASURE_KILLS cycles (skipped when unset; docs/BENCHMARKS.md has
// the figures): each cycle writes with eight writers, kills Redis, restarts
// it on the same files and counts the acknowledged keys that are gone.
func TestMeasureLossPerKill(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv("PAWL_MEASURE_KILLS"))
	if cycles == 0 {
		t.Skip("set PAWL_MEASURE_KILLS to measure")
	}
	for _, fsync := range []string{"everysec", "always"} {
		t.Run(fsync, func(t *testing.T) {
			srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", fsync)
			var total, lost, maxLost int
			for c := range cycles {
				rdb := newClient(t, srv.Addr)
				s, err := Open(context.Background(), rdb, fmt.Sprintf("loss%d", c))
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var acked []string
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ctx.Err() == nil; i++ {
							key := fmt.Sprintf("/m/%d/%d", w, i)
							if _, err := s.Put(ctx, store.Put{Key: key, Value: []byte("v")}); err != nil {
								return
							}
							mu.Lock()
							acked = append(acked, key)
							mu.Unlock()
						}
					}()
				}
				time.Sleep(300 * time.Millisecond) // write for a while: the load, not a synchronisation
				srv.Kill(t)
				cancel()
				wg.Wait()
				_ = s.Close()
				srv.Restart(t)
				after, err := Open(context.Background(), newClient(t, srv.Addr), fmt.Sprintf("loss%d", c))
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, key := range acked {
					if _, _, err := after.Get(context.Background(), key, 0); err != nil {
						n++
					}
				}
				_ = after.Close()
				total += len(acked)
				lost += n
				maxLost = max(maxLost, n)
			}
			t.Logf("appendfsync %s: %d kill cycles, %d acknowledged writes, %d lost (%.2f per cycle, at most %d in one)",
				fsync, cycles, total, lost, float64(lost)/float64(cycles), maxLost)
		})
	}
}
