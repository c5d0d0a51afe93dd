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
	cmd := exec.Command(pawldBinary, append(args, "--log-format", "json")...)
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
// while eight writers put without pause, again and again: after each
// restart every answered put is there, with its value, at the revision its
// answer named, and the revisions run without a gap. At least one kill
// must catch changes in the write-ahead log that the database did not
// have yet, or the test did not reach the recovery it is about.
func TestSIGKILLUnderLoadLosesNoAcknowledgedWrite(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	type put struct {
		value string
		rev   int64
	}
	acked := map[string]put{}
	recovered := 0
	check := func(kv pawlv1connect.KVServiceClient) {
		t.Helper()
		got := map[string]*pawlv1.KeyValue{}
		var rev int64
		for token := ""; ; {
			resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/crash/", Revision: rev, PageSize: 1000, PageToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Msg.GetRevision()
			for _, e := range resp.Msg.GetKvs() {
				got[e.GetKey()] = e
			}
			if token = resp.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		for key, want := range acked {
			e := got[key]
			if e == nil || string(e.GetValue()) != want.value || e.GetModRevision() != want.rev {
				t.Fatalf("%s was answered at revision %d; after the restart: %v", key, want.rev, e)
			}
		}
		// Every revision up to the head is one key's put: no gap, no repeat
		// (the keys are all different, and nothing else is written).
		if int64(len(got)) != rev {
			t.Fatalf("%d keys at revision %d", len(got), rev)
		}
	}
	for cycle := 0; cycle < 12 && (cycle < 3 || recovered == 0); cycle++ {
		p := startPawld(t, dir)
		for _, line := range p.seen {
			if line["msg"] == "recovered changes from the write-ahead log" {
				recovered += int(line["changes"].(float64))
			}
		}
		kv := p.client(t)
		check(kv)
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answered := make(chan struct{}, 1<<16)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; wctx.Err() == nil; i++ {
					key, value := fmt.Sprintf("/crash/%d/%d/%d", cycle, w, i), fmt.Sprintf("v%d", i)
					resp, err := kv.Put(wctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
					if err != nil {
						return // the kill, or the end: its outcome is unknown
					}
					mu.Lock()
					acked[key] = put{value: value, rev: resp.Msg.GetRevision()}
					mu.Unlock()
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
	}
	if recovered == 0 {
		t.Fatal("no kill caught a change the database did not have yet: the recovery from the write-ahead log never ran")
	}
	p := startPawld(t, dir)
	check(p.client(t))
	p.stop(t)
	t.Logf("%d answered puts survived the kills; %d changes came back from the write-ahead log", len(acked), recovered)
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
