package main_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// TestConnectionFloodLeavesRoomForTheAdmin: pawld with 1,024 open files
// (a common default for a service) derives its connection limit from
// them, keeping files for its store and a reserve for the admin network;
// a flood of idle connections from one address beyond it is refused at
// once, logged a few times rather than once per connection, and a write
// from the admin network (through the store's files) still answers.
// Without the limit the flood takes every file: accept fails, and the
// admin's call waits until idle connections time out.
func TestConnectionFloodLeavesRoomForTheAdmin(t *testing.T) {
	const files, flood = 1024, 1500
	p := startCommand(t, "/bin/sh", "-c", `ulimit -n 1024 && exec "$0" "$@"`, pawldBinary,
		"--listen", "127.0.0.1:0", "--data", t.TempDir(), "--admin-networks", "127.0.0.1/32",
		// The flood's connections stay open for the whole test.
		"--read-header-timeout", "10m")
	listening := p.seen[len(p.seen)-1]
	if want := float64(files - 256 - 32); listening["max_conns"] != want {
		t.Errorf("max_conns %v, want %v: RLIMIT_NOFILE less the files kept and the reserve", listening["max_conns"], want)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 30 * time.Second}
	for range flood {
		c, err := d.Dial("tcp", p.addr)
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused before the dial returned
		}
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}).DialContext}
	defer tr.CloseIdleConnections()
	admin := pawlv1connect.NewKVServiceClient(&http.Client{Transport: tr}, "http://"+p.addr, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/admin/k", Value: []byte("v")})); err != nil {
		t.Fatalf("a write from the admin network during the flood: %v", err)
	}
	p.await(t, "connection refused: over a limit")
	tr.CloseIdleConnections()
	p.stop(t)
	refusals := 0
	for _, line := range p.seen {
		if line["msg"] == "connection refused: over a limit" {
			refusals++
		}
	}
	if refusals > 5 {
		t.Errorf("%d refusals were logged one by one; want a line per interval", refusals)
	}
}
