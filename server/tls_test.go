package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testtls"
	"github.com/pawlcfg/pawl/server"
)

func TestTLSServesGRPCAndConnect(t *testing.T) {
	dir := t.TempDir()
	pki := testtls.New(t)
	certFile, keyFile, pool := pki.ServerCert, pki.ServerKey, pki.RootCAs()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.WithDataDir(filepath.Join(dir, "data")), server.WithTLS(certFile, keyFile),
		server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "https://" + ln.Addr().String()
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPC()}} {
		kv := pawlv1connect.NewKVServiceClient(client, url, opts...)
		if _, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/tls", Value: []byte("x")})); err != nil {
			t.Fatalf("Put over TLS: %v", err)
		}
	}
	// A client that does not trust the certificate is refused.
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	kv := pawlv1connect.NewKVServiceClient(&http.Client{Transport: plain}, url)
	if _, err := kv.Get(context.Background(), connect.NewRequest(&pawlv1.GetRequest{Key: "/tls"})); err == nil {
		t.Fatal("an untrusting client connected")
	}
}
