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
}

// startPawld runs the real binary on a free port and waits for its
// "pawld listening" log line.
func startPawld(t testing.TB, dataDir string) *pawld {
	t.Helper()
	cmd := exec.Command(pawldBinary, "--listen", "127.0.0.1:0", "--data", dataDir, "--log-format", "json")
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
