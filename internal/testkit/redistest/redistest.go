// Package redistest gives tests a real Redis: the shared one on
// 127.0.0.1:6379 (or $PAWL_TEST_REDIS) under a random key prefix that is
// deleted when the test ends, or a private redis-server of the test's own
// (with persistence, or one it may kill) on a free port in a temporary
// directory. A test that cannot reach the shared Redis skips, except under
// CI=true, where it fails.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr returns the address of the shared Redis.
func Addr() string {
	if a := os.Getenv("PAWL_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Prefix returns a new random prefix for a test's keys.
func Prefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pawltest-" + hex.EncodeToString(b[:])
}

// Shared returns a client of the shared Redis and a random prefix whose
// keys (those under the hash tag {prefix}) are deleted when the test ends.
// It skips the test when Redis cannot be reached, unless CI is set.
func Shared(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis at %s: %v (CI needs a Redis)", Addr(), err)
		}
		t.Skipf("redis at %s: %v", Addr(), err)
	}
	prefix := Prefix()
	t.Cleanup(func() {
		DeletePrefix(t, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes the keys of a store under prefix.
func DeletePrefix(t testing.TB, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "{"+prefix+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("redistest: scan %s: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Logf("redistest: delete %s: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// Server is a private redis-server of one test.
type Server struct {
	// Addr is where it listens.
	Addr string
	// Dir is its working directory, where it keeps its files.
	Dir string

	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a redis-server on a free port in a temporary directory,
// with extra configuration args (such as "--appendonly", "yes"), and
// stops it when the test ends. It fails the test when redis-server is not
// installed.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: redis-server is not installed: %v", err)
	}
	s := &Server{Dir: t.TempDir(), args: args}
	s.Addr = freeAddr(t)
	s.start(t)
	t.Cleanup(func() { s.Kill(t) })
	return s
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "", "--logfile", filepath.Join(s.Dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Dir = s.Dir
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			t.Fatalf("redistest: redis-server exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Kill kills the server with SIGKILL (no shutdown, no final save) and
// waits for it to exit. Killing a stopped server does nothing.
func (s *Server) Kill(t testing.TB) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port and directory, after
// Kill.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("redistest: Restart of a running server")
	}
	s.start(t)
}

// Port returns the server's port.
func (s *Server) Port() int {
	_, port, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

// StartCluster starts a Redis Cluster of n primaries (no replicas), each a
// private redis-server, and returns their addresses once the cluster
// reports itself ok. It fails the test when redis-cli is not installed.
func StartCluster(t testing.TB, n int) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redistest: redis-cli is not installed: %v", err)
	}
	var addrs []string
	for range n {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redistest: create the cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = rdb.Close()
				t.Fatalf("redistest: the cluster at %s is not ok: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond) // the cluster has no readiness event to await
		}
		_ = rdb.Close()
	}
	return addrs
}

// StartSentinel starts a Redis Sentinel on a free port that monitors the
// primary at primaryAddr under the name master (quorum 1), with extra
// configuration lines (such as "sentinel down-after-milliseconds NAME
// 500"), and returns its address once it knows the primary.
func StartSentinel(t testing.TB, master, primaryAddr string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	phost, pport, _ := net.SplitHostPort(primaryAddr)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %s\nbind %s\ndir %s\nsentinel monitor %s %s %s 1\n", port, host, dir, master, phost, pport)
	for _, line := range extra {
		body += line + "\n"
	}
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: start sentinel: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.GetMasterAddrByName(context.Background(), master).Result()
		if err == nil && len(got) == 2 && got[1] == pport {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel on %s does not know %s: %v %v", addr, master, got, err)
		}
		time.Sleep(20 * time.Millisecond) // a child process has no readiness event to await
	}
}
