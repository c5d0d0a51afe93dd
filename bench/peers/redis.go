package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

type redisPeer struct {
	p    *proc
	rdb  *redis.Client
	addr string
	subs []*redis.PubSub
	// publish has every put publish its key, as it does once watchers
	// subscribed (the writer process knows of none).
	publish bool
}

func startRedis(ctx context.Context, dir string) (system, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProc(ctx, dir, addr, "redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--maxclients", "20000")
	if err != nil {
		return nil, err
	}
	return &redisPeer{p: p, addr: addr, rdb: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})}, nil
}

func (s *redisPeer) writeTo() (kind, addr string) { return "redis", s.addr }

func (s *redisPeer) name() string { return "Redis 7 (SET, pub/sub)" }

func (s *redisPeer) put(ctx context.Context, key string, value []byte) error {
	if err := s.rdb.Set(ctx, key, value, 0).Err(); err != nil {
		return err
	}
	if s.publish || len(s.subs) > 0 {
		return s.rdb.Publish(ctx, "fan", key).Err()
	}
	return nil
}

func (s *redisPeer) subscribe(ctx context.Context, n int, deliver func(int)) error {
	for range n {
		// A subscription is per connection: one connection per watcher.
		c := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 1})
		ps := c.Subscribe(ctx, "fan")
		if _, err := ps.Receive(ctx); err != nil {
			return err
		}
		s.subs = append(s.subs, ps)
		ch := ps.Channel(redis.WithChannelSize(1000))
		go func() {
			defer c.Close()
			for m := range ch {
				deliver(index(m.Payload))
			}
		}()
	}
	return nil
}

func (s *redisPeer) catchUp(context.Context, int) (bool, error) { return false, nil }

func (s *redisPeer) server() *proc { return s.p }

func (s *redisPeer) close() {
	for _, ps := range s.subs {
		_ = ps.Close()
	}
	_ = s.rdb.Close()
	s.p.stop()
}
