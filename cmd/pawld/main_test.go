package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

var pawldBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pawld-test")
	if err != nil {
		panic(err)
	}
	pawldBinary = filepath.Join(dir, "pawld")
	if out, err := exec.Command("go", "build", "-o", pawldBinary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build pawld: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pawld is a running pawld process.
type pawld struct {
	cmd    *exec.Cmd
	addr   string
	logs   chan map[string]any
	waited chan error
	// seen are the log lines await read, in order.
	seen []map[string]any
}

// startPawld runs the real binary on a free port and waits for its
// "pawld listening" log line.
func startPawld(t testing.TB, dataDir string) *pawld {
	t.Helper()
	return startPawldWith(t, "--listen", "127.0.0.1:0", "--data", dataDir)
}

// startPawldWith runs the real binary with args and waits for its
// "pawld listening" log line.
func startPawldWith(t testing.TB, args ...string) *pawld {
	t.Helper()
	return startCommand(t, pawldBinary, args...)
}

// startCommand is startPawldWith for a command that runs pawld, such as a
// shell that sets its limits first.
func startCommand(t testing.TB, name string, args ...string) *pawld {
	t.Helper()
	cmd := exec.Command(name, append(args, "--log-format", "json")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pawld{cmd: cmd, logs: make(chan map[string]any, 100), waited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				p.logs <- line
			}
		}
		close(p.logs)
		p.waited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			p.drain()
		}
	})
	line := p.await(t, "pawld listening")
	p.addr = line["addr"].(string)
	return p
}

func (p *pawld) await(t testing.TB, msg string) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-p.logs:
			if !ok {
				t.Fatalf("pawld exited before logging %q", msg)
			}
			p.seen = append(p.seen, line)
			if line["msg"] == msg {
				return line
			}
		case <-timeout:
			t.Fatalf("pawld did not log %q", msg)
		}
	}
}

// drain discards the remaining logs and returns the exit error.
func (p *pawld) drain() error {
	for range p.logs {
	}
	return <-p.waited
}

// stop sends SIGTERM and expects a clean exit.
func (p *pawld) stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.await(t, "pawld stopped")
	if err := p.drain(); err != nil {
		t.Fatalf("pawld exit: %v", err)
	}
}

func (p *pawld) client(t testing.TB) pawlv1connect.KVServiceClient {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	return pawlv1connect.NewKVServiceClient(&http.Client{Transport: tr}, "http://"+p.addr, connect.WithGRPC())
}

// TestRestartKeepsEveryAcknowledgedWrite writes from concurrent clients,
// stops pawld with SIGTERM while a watch is open, and starts it again on the
// same data directory.
func TestRestartKeepsEveryAcknowledgedWrite(t *testing.T) {
	dir := t.TempDir()
	p := startPawld(t, dir)
	kv := p.client(t)
	ctx := context.Background()

	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	stream, err := kv.Watch(watchCtx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}

	const writers, each = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]string{}
	var maxRev int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key, value := fmt.Sprintf("/restart/%d/%d", w, i), fmt.Sprintf("v%d-%d", w, i)
				resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[key] = value
				maxRev = max(maxRev, resp.Msg.GetRevision())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if maxRev != writers*each {
		t.Fatalf("last revision %d, want %d", maxRev, writers*each)
	}

	p.stop(t)
	for stream.Receive() {
	}
	if code := connect.CodeOf(stream.Err()); code != connect.CodeUnavailable {
		t.Fatalf("watch across shutdown ended with %v, want unavailable", stream.Err())
	}

	p = startPawld(t, dir)
	kv = p.client(t)
	list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/restart/", PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if list.Msg.GetRevision() != maxRev {
		t.Fatalf("restarted at revision %d, want %d", list.Msg.GetRevision(), maxRev)
	}
	if len(list.Msg.GetKvs()) != len(acked) {
		t.Fatalf("restarted with %d keys, want %d", len(list.Msg.GetKvs()), len(acked))
	}
	for _, kv := range list.Msg.GetKvs() {
		if acked[kv.GetKey()] != string(kv.GetValue()) {
			t.Fatalf("%s = %q after restart, want %q", kv.GetKey(), kv.GetValue(), acked[kv.GetKey()])
		}
	}
	resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/after-restart"}))
	if err != nil || resp.Msg.GetRevision() != maxRev+1 {
		t.Fatalf("first put after restart: revision %d, %v; want %d", resp.Msg.GetRevision(), err, maxRev+1)
	}
	// The change log survived too: a watch from revision 1 replays it.
	stream2, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/", StartRevision: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream2.Close()
	var n int64
	for n < maxRev+1 && stream2.Receive() {
		for _, ev := range stream2.Msg().GetEvents().GetEvents() {
			n++
			if ev.GetKv().GetModRevision() != n {
				t.Fatalf("replayed revision %d at position %d", ev.GetKv().GetModRevision(), n)
			}
		}
	}
	p.stop(t)
}

// TestSIGKILLUnderLoadLosesNoAcknowledgedWrite kills pawld with SIGKILL
// while eight writers put, overwrite with compare-and-swap, delete with
// compare-and-swap, commit transactions (two puts and a delete) and send
// compare-and-swaps that must fail, without pause, again and again; a
// watcher follows every change and resumes after each restart from the
// revision after the last one it received. After each restart every
// answered change is in the change log at the revision its answer named,
// and nothing else is except the writes the kill caught unanswered; the
// watcher has received every revision exactly once, in order, the
// answered ones as answered; the keys match the change log; no revision
// is ever handed out twice. At least one kill must catch changes in the
// write-ahead log that the database did not have yet, or the test did
// not reach the recovery it is about.
func TestSIGKILLUnderLoadLosesNoAcknowledgedWrite(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	type change struct {
		del   bool
		key   string
		value string
	}
	var (
		mu       sync.Mutex
		acked    = map[int64]change{} // every answered change, by revision
		unknown  = map[string]bool{}  // keys of the writes a kill left unanswered
		seen     = map[int64]change{} // what the watcher received
		lastSeen int64
		progress = make(chan struct{}, 1)
	)
	answer := func(rev int64, c change) {
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := acked[rev]; ok {
			t.Errorf("revision %d was handed out twice: %+v, then %+v", rev, prev, c)
		}
		acked[rev] = c
	}
	// watch follows /crash/ from the revision after the last one received
	// until the stream ends (the kill).
	watch := func(wctx context.Context, kv pawlv1connect.KVServiceClient) {
		mu.Lock()
		from := lastSeen + 1
		mu.Unlock()
		stream, err := kv.Watch(wctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/crash/", StartRevision: from}))
		if err != nil {
			return
		}
		defer stream.Close()
		for stream.Receive() {
			msg := stream.Msg()
			if msg.GetStale() != nil || msg.GetCompacted() != nil {
				t.Errorf("the watch from %d: %v", from, msg)
				return
			}
			mu.Lock()
			for _, ev := range msg.GetEvents().GetEvents() {
				rev := ev.GetKv().GetModRevision()
				if rev != lastSeen+1 {
					t.Errorf("the watcher received revision %d after %d", rev, lastSeen)
				}
				seen[rev] = change{del: ev.GetType() == pawlv1.EventType_EVENT_TYPE_DELETE, key: ev.GetKv().GetKey(), value: string(ev.GetKv().GetValue())}
				lastSeen = rev
			}
			mu.Unlock()
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}
	recovered := 0
	// check waits for the watcher to reach the head revision and checks
	// the change log, the watcher and the keys against the answers.
	check := func(kv pawlv1connect.KVServiceClient) int64 {
		t.Helper()
		got := map[string]*pawlv1.KeyValue{}
		var head int64
		for token := ""; ; {
			resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/crash/", Revision: head, PageSize: 1000, PageToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			head = resp.Msg.GetRevision()
			for _, e := range resp.Msg.GetKvs() {
				got[e.GetKey()] = e
			}
			if token = resp.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		timeout := time.After(30 * time.Second)
		for {
			mu.Lock()
			caught := lastSeen >= head
			mu.Unlock()
			if caught {
				break
			}
			select {
			case <-progress:
			case <-timeout:
				t.Fatalf("the watcher did not reach revision %d", head)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string]change{}
		for rev := int64(1); rev <= head; rev++ {
			c, ok := seen[rev]
			if !ok {
				t.Fatalf("the watcher never received revision %d", rev)
			}
			if a, ok := acked[rev]; ok && a != c {
				t.Fatalf("revision %d was answered as %+v; the watcher received %+v", rev, a, c)
			} else if !ok && !unknown[c.key] {
				t.Fatalf("revision %d (%+v) was never written", rev, c)
			}
			if c.del {
				delete(want, c.key)
			} else {
				want[c.key] = change{key: c.key, value: c.value}
			}
		}
		for rev := range acked {
			if rev > head {
				t.Fatalf("revision %d was answered; after the restart the store is at %d", rev, head)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d keys at revision %d; the change log makes %d", len(got), head, len(want))
		}
		for key, w := range want {
			if e := got[key]; e == nil || string(e.GetValue()) != w.value {
				t.Fatalf("%s = %v at revision %d; the change log makes it %q", key, e, head, w.value)
			}
		}
		return head
	}
	var head int64
	for cycle := 0; cycle < 12 && (cycle < 3 || recovered == 0); cycle++ {
		p := startPawld(t, dir)
		for _, line := range p.seen {
			if line["msg"] == "recovered changes from the write-ahead log" {
				recovered += int(line["changes"].(float64))
			}
		}
		kv := p.client(t)
		wctx, cancel := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); watch(wctx, kv) }()
		head = check(kv)
		var wg sync.WaitGroup
		answered := make(chan struct{}, 1<<16)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				type owned struct {
					key string
					rev int64
				}
				var keys []owned // this writer's keys that exist, as answered
				lost := func(ks ...string) {
					mu.Lock()
					for _, k := range ks {
						unknown[k] = true
					}
					mu.Unlock()
				}
				for i := 0; wctx.Err() == nil; i++ {
					base, value := fmt.Sprintf("/crash/%d/%d/%d", cycle, w, i), fmt.Sprintf("v%d", i)
					switch {
					case i%5 == 4 && len(keys) > 0: // a transaction: two puts and a delete
						victim := keys[0]
						resp, err := kv.Txn(wctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{
							{Key: base + "a", Value: []byte(value)}, {Key: base + "b", Value: []byte(value)}, {Key: victim.key, Delete: true},
						}}))
						if err != nil {
							lost(base+"a", base+"b", victim.key)
							return // the kill, or the end: its outcome is unknown
						}
						rev := resp.Msg.GetRevision()
						answer(rev-2, change{key: base + "a", value: value})
						answer(rev-1, change{key: base + "b", value: value})
						answer(rev, change{del: true, key: victim.key})
						keys = append(keys[1:], owned{base + "a", rev - 2}, owned{base + "b", rev - 1})
					case i%7 == 6 && len(keys) > 0: // compare-and-swap
						o := &keys[len(keys)-1]
						resp, err := kv.Put(wctx, connect.NewRequest(&pawlv1.PutRequest{Key: o.key, Value: []byte(value), ExpectedModRevision: &o.rev}))
						if err != nil {
							lost(o.key)
							return
						}
						o.rev = resp.Msg.GetRevision()
						answer(o.rev, change{key: o.key, value: value})
					case i%11 == 10 && len(keys) > 0: // a compare-and-swap that must fail
						o := keys[len(keys)-1]
						wrong := o.rev + 1000
						_, err := kv.Put(wctx, connect.NewRequest(&pawlv1.PutRequest{Key: o.key, Value: []byte("never"), ExpectedModRevision: &wrong}))
						if connect.CodeOf(err) != connect.CodeFailedPrecondition {
							if err == nil {
								t.Errorf("a put of %s expecting revision %d succeeded", o.key, wrong)
							}
							lost(o.key)
							return
						}
					case i%13 == 12 && len(keys) > 0: // a delete with compare-and-swap
						o := keys[len(keys)-1]
						resp, err := kv.Delete(wctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: o.key, ExpectedModRevision: &o.rev}))
						if err != nil {
							lost(o.key)
							return
						}
						answer(resp.Msg.GetRevision(), change{del: true, key: o.key})
						keys = keys[:len(keys)-1]
					default:
						resp, err := kv.Put(wctx, connect.NewRequest(&pawlv1.PutRequest{Key: base, Value: []byte(value)}))
						if err != nil {
							lost(base)
							return
						}
						answer(resp.Msg.GetRevision(), change{key: base, value: value})
						keys = append(keys, owned{base, resp.Msg.GetRevision()})
					}
					select {
					case answered <- struct{}{}:
					default:
					}
				}
			}()
		}
		for range 300 + 100*cycle { // a different moment in each cycle
			<-answered
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.drain()
		cancel()
		wg.Wait()
		<-watched
	}
	if recovered == 0 {
		t.Fatal("no kill caught a change the database did not have yet: the recovery from the write-ahead log never ran")
	}
	p := startPawld(t, dir)
	kv := p.client(t)
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); watch(wctx, kv) }()
	head = check(kv)
	resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/crash/after"}))
	if err != nil || resp.Msg.GetRevision() != head+1 {
		t.Fatalf("the first put after the last restart: revision %d, %v; want %d", resp.Msg.GetRevision(), err, head+1)
	}
	cancel()
	<-watched
	p.stop(t)
	t.Logf("%d answered changes survived the kills, each received once by the watcher; %d changes came back from the write-ahead log", len(acked), recovered)
}

func TestBadFlagsFail(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud"}, {"--tls-cert", "x.pem"}, {"extra"}, {"--max-value-bytes", "0"}} {
		cmd := exec.Command(pawldBinary, append(args, "--data", t.TempDir(), "--listen", "127.0.0.1:0")...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("pawld %v succeeded", args)
		}
		if len(out) == 0 {
			t.Errorf("pawld %v said nothing", args)
		}
	}
}
