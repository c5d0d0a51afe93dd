package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type etcd struct {
	p       *proc
	clients []*clientv3.Client
	url     string // where its clients connect
	next    int
	mu      sync.Mutex
}

func startEtcd(ctx context.Context, dir string) (system, error) {
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	curl, purl := fmt.Sprintf("http://127.0.0.1:%d", cport), fmt.Sprintf("http://127.0.0.1:%d", pport)
	p, err := startProc(ctx, dir, fmt.Sprintf("127.0.0.1:%d", cport), "etcd", "--data-dir", dir+"/data",
		"--listen-client-urls", curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
		"--initial-advertise-peer-urls", purl, "--initial-cluster", "default="+purl, "--log-level", "warn",
		"--quota-backend-bytes", "8589934592")
	if err != nil {
		return nil, err
	}
	s := &etcd{p: p, url: curl}
	for range 64 {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{curl}, DialTimeout: 5 * time.Second})
		if err != nil {
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

func (s *etcd) writeTo() (kind, addr string) { return "etcd", s.url }

func (s *etcd) name() string { return "etcd 3.4" }

func (s *etcd) client() *clientv3.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.clients[s.next%len(s.clients)]
}

func (s *etcd) put(ctx context.Context, key string, value []byte) error {
	_, err := s.client().Put(ctx, key, string(value))
	return err
}

func (s *etcd) subscribe(ctx context.Context, n int, deliver func(int)) error {
	for i := range n {
		// WithCreatedNotify: the first response says the watch is set up.
		ch := s.clients[i%len(s.clients)].Watch(clientv3.WithRequireLeader(ctx), "/fan/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		if resp := <-ch; !resp.Created {
			return fmt.Errorf("watch %d not created: %v", i, resp.Err())
		}
		go func() {
			for resp := range ch {
				for _, ev := range resp.Events {
					deliver(index(string(ev.Kv.Key)))
				}
			}
		}()
	}
	return nil
}

func (s *etcd) catchUp(ctx context.Context, count int) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first, err := s.clients[0].Get(ctx, "/cu/000000")
	if err != nil || len(first.Kvs) == 0 {
		return false, fmt.Errorf("read the first write: %v", err)
	}
	ch := s.clients[0].Watch(ctx, "/cu/", clientv3.WithPrefix(), clientv3.WithRev(first.Kvs[0].ModRevision))
	got := 0
	for resp := range ch {
		got += len(resp.Events)
		if got >= count {
			return true, nil
		}
	}
	return false, fmt.Errorf("caught up %d of %d", got, count)
}

func (s *etcd) server() *proc { return s.p }

func (s *etcd) close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
	s.p.stop()
}
