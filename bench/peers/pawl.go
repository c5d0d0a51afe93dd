package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

var (
	pawldOnce sync.Once
	pawldBin  string
	pawldErr  error
)

type pawl struct {
	p       *proc
	url     string
	pprof   string                          // where pawld serves its profiles
	h2cs    []*http.Client                  // the connections
	clients []pawlv1connect.KVServiceClient // one on each connection
	next    int
	mu      sync.Mutex
}

func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func startPawl(ctx context.Context, dir string) (system, error) {
	pawldOnce.Do(func() {
		if pawldBin != "" {
			return
		}
		pawldBin = filepath.Join(os.TempDir(), fmt.Sprintf("peers-pawld-%d", os.Getpid()))
		// Built in Pawl's own module (two levels up), with its dependencies.
		build := exec.Command("go", "build", "-o", pawldBin, "./cmd/pawld")
		build.Dir = filepath.Join("..", "..")
		build.Stderr = os.Stderr
		pawldErr = build.Run()
	})
	if pawldErr != nil {
		return nil, fmt.Errorf("build pawld: %w", pawldErr)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pprofAddr, err := benchkit.FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startProc(ctx, dir, addr, pawldBin, "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "warn", "--pprof", pprofAddr)
	if err != nil {
		return nil, err
	}
	s := &pawl{p: p, url: "http://" + addr, pprof: "http://" + pprofAddr}
	for range 64 {
		c := h2c()
		s.h2cs = append(s.h2cs, c)
		s.clients = append(s.clients, pawlv1connect.NewKVServiceClient(c, s.url, connect.WithGRPC()))
	}
	return s, nil
}

func (s *pawl) name() string { return "Pawl (pawld, embedded store)" }

func (s *pawl) client() pawlv1connect.KVServiceClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.clients[s.next%len(s.clients)]
}

func (s *pawl) put(ctx context.Context, key string, value []byte) error {
	_, err := s.client().Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: value}))
	return err
}

func (s *pawl) subscribe(ctx context.Context, n int, deliver func(int)) error {
	var ready sync.WaitGroup
	for i := range n {
		stream, err := s.clients[i%len(s.clients)].Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/fan/"}))
		if err != nil {
			return err
		}
		ready.Add(1)
		go func() {
			defer stream.Close()
			first := true
			for stream.Receive() {
				if first {
					ready.Done()
					first = false
				}
				for _, ev := range stream.Msg().GetEvents().GetEvents() {
					deliver(index(ev.GetKv().GetKey()))
				}
			}
			if first {
				ready.Done()
			}
		}()
	}
	ready.Wait()
	return nil
}

func (s *pawl) catchUp(ctx context.Context, count int) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.clients[0].Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/cu/", StartRevision: 1}))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	got := 0
	for got < count && stream.Receive() {
		got += len(stream.Msg().GetEvents().GetEvents())
	}
	if got < count {
		return false, fmt.Errorf("caught up %d of %d: %v", got, count, stream.Err())
	}
	return true, nil
}

func (s *pawl) server() *proc { return s.p }

func (s *pawl) cpuProfile(ctx context.Context, d time.Duration, file string) error {
	return benchkit.SaveProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.pprof, int(d.Seconds())), file)
}

func (s *pawl) serverTimes(ctx context.Context) (serverTimes, error) {
	put, err := benchkit.ReadHistogram(ctx, s.url+"/metrics", "pawl_rpc_duration_seconds", `procedure="/pawl.v1.KVService/Put"`)
	if err != nil {
		return serverTimes{}, err
	}
	commit, err := benchkit.ReadHistogram(ctx, s.url+"/metrics", "pawl_store_commit_seconds", `outcome="ok"`)
	return serverTimes{put: put, commit: commit}, err
}

func (s *pawl) writeTo() (kind, addr string) { return "pawl", s.url }

func (s *pawl) close() {
	for _, c := range s.clients {
		_ = c // the transports close with the process
	}
	s.p.stop()
}
