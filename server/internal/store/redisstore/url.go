package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a Redis client for a store URL:
//
//	redis://[user:password@]host:port[/db]          one server
//	rediss://...                                     one server over TLS
//	redis+sentinel://[user:password@]h1:p1,h2:p2/master[/db]  Sentinel
//	redis+cluster://[user:password@]h1:p1,h2:p2     Cluster
//
// The client is go-redis's universal client, so the rest of the engine
// does not care which one it got. It does not retry a command whose
// connection broke (a mutation retried so could apply twice): the engine
// reports store.ErrUnavailable and its callers decide. The caller closes
// it.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: %q is not a redis:// URL", rawURL)
	}
	switch scheme {
	case "redis", "rediss":
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		opt.MaxRetries = -1
		return redis.NewClient(opt), nil
	case "redis+sentinel", "redis+cluster":
	default:
		return nil, fmt.Errorf("redisstore: URL scheme %q: want redis, rediss, redis+sentinel or redis+cluster", scheme)
	}
	// url.Parse rejects several host:port pairs, so the hosts are cut out
	// by hand.
	var user, password string
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		u, err := url.Parse("redis://" + rest[:at+1] + "h")
		if err != nil {
			return nil, fmt.Errorf("redisstore: %q: %w", rawURL, err)
		}
		user = u.User.Username()
		password, _ = u.User.Password()
		rest = rest[at+1:]
	}
	hostPart, path, _ := strings.Cut(rest, "/")
	if hostPart == "" {
		return nil, fmt.Errorf("redisstore: %q names no host", rawURL)
	}
	addrs := strings.Split(hostPart, ",")
	segments := []string{}
	if path != "" {
		segments = strings.Split(strings.Trim(path, "/"), "/")
	}
	if scheme == "redis+cluster" {
		if len(segments) > 0 {
			return nil, fmt.Errorf("redisstore: %q: a cluster URL has no path (Cluster has only database 0)", rawURL)
		}
		return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, Username: user, Password: password, IsClusterMode: true, MaxRetries: -1}), nil
	}
	if len(segments) == 0 || segments[0] == "" || len(segments) > 2 {
		return nil, fmt.Errorf("redisstore: %q: a sentinel URL is redis+sentinel://hosts/master[/db]", rawURL)
	}
	db := 0
	if len(segments) == 2 {
		n, err := strconv.Atoi(segments[1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("redisstore: %q: database %q is not a number", rawURL, segments[1])
		}
		db = n
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, MasterName: segments[0], DB: db, Username: user, Password: password, MaxRetries: -1}), nil
}

// SetLogger sends go-redis's own log lines (reconnects, failed dials) to
// log at debug level: the engine reports what matters through its errors
// and its feed's staleness. go-redis's logger is process-wide and is not
// safe to replace while clients run, so only the first call counts.
func SetLogger(log *slog.Logger) { setLoggerOnce.Do(func() { redis.SetLogger(redisLogger{log}) }) }

var setLoggerOnce sync.Once

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
