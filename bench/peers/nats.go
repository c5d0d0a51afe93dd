package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

type natsPeer struct {
	p     *proc
	conns []*nats.Conn
	pub   *nats.Conn
	addr  string
}

func startNATS(ctx context.Context, dir string) (system, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProc(ctx, dir, addr, "nats-server", "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	if err != nil {
		return nil, err
	}
	s := &natsPeer{p: p, addr: addr}
	if s.pub, err = nats.Connect("nats://" + addr); err != nil {
		s.close()
		return nil, err
	}
	for range 64 {
		c, err := nats.Connect("nats://"+addr, nats.MaxPingsOutstanding(10))
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, c)
	}
	return s, nil
}

func (s *natsPeer) writeTo() (kind, addr string) { return "nats", s.addr }

func (s *natsPeer) name() string { return "NATS 2.9 (core pub/sub: puts are publishes, kept nowhere)" }

// put publishes and flushes (the server has it): core NATS keeps nothing,
// so this is no durable write.
func (s *natsPeer) put(ctx context.Context, key string, value []byte) error {
	if err := s.pub.Publish("fan."+strings.ReplaceAll(strings.Trim(key, "/"), "/", "."), value); err != nil {
		return err
	}
	return s.pub.FlushTimeout(10 * time.Second)
}

func (s *natsPeer) subscribe(ctx context.Context, n int, deliver func(int)) error {
	for i := range n {
		c := s.conns[i%len(s.conns)]
		sub, err := c.Subscribe("fan.fan.*", func(m *nats.Msg) { deliver(index(m.Subject)) })
		if err != nil {
			return err
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	for _, c := range s.conns {
		if err := c.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func (s *natsPeer) catchUp(context.Context, int) (bool, error) { return false, nil }

func (s *natsPeer) server() *proc { return s.p }

func (s *natsPeer) close() {
	for _, c := range s.conns {
		c.Close()
	}
	if s.pub != nil {
		s.pub.Close()
	}
	s.p.stop()
}
