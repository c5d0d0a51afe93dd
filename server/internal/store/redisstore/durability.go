package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Durability is what Redis's persistence settings let the store promise
// about an acknowledged write, read with CONFIG GET (on a Cluster, from
// the primary of the store's slot).
type Durability struct {
	// AppendOnly and AppendFsync are Redis's appendonly and appendfsync;
	// Save its RDB snapshot schedule ("" for none).
	AppendOnly  bool
	AppendFsync string
	Save        string
	// Known is false when CONFIG GET was refused (a managed Redis often
	// renames or forbids it); Err says why.
	Known bool
	Err   error
	// Promise says, in a sentence, what survives a crash.
	Promise string
}

// Durability reads Redis's persistence settings and says what they
// promise, given the store's options (WithWaitAOF).
func (s *Store) Durability(ctx context.Context) Durability {
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		if primary, err := cc.MasterForKey(ctx, s.k.rev); err == nil {
			node = primary
		}
	}
	cfg, err := node.ConfigGet(ctx, "appendonly").Result()
	if err == nil {
		var more map[string]string
		if more, err = node.ConfigGet(ctx, "appendfsync").Result(); err == nil {
			cfg["appendfsync"] = more["appendfsync"]
			if more, err = node.ConfigGet(ctx, "save").Result(); err == nil {
				cfg["save"] = more["save"]
			}
		}
	}
	if err != nil {
		return Durability{Err: err, Promise: fmt.Sprintf("Redis refused CONFIG GET (%v): what survives a crash of Redis is unknown here; "+
			"check its appendonly and appendfsync settings", err)}
	}
	d := Durability{Known: true, AppendOnly: cfg["appendonly"] == "yes", AppendFsync: cfg["appendfsync"], Save: strings.TrimSpace(cfg["save"])}
	switch {
	case d.AppendOnly && (d.AppendFsync == "always" || s.opts.waitAOF):
		d.Promise = "an acknowledged write survives a crash of the Redis process or host (appendonly yes, " + fsyncWhy(d, s.opts.waitAOF) + ")"
	case d.AppendOnly:
		d.Promise = "appendonly yes, appendfsync " + d.AppendFsync + ": a crash of the Redis host can lose about the last two seconds of acknowledged writes " +
			"(Redis fsyncs once a second and lets the fsync fall up to two seconds behind); a crash of the Redis process alone loses none " +
			"(the file's data is with the operating system); appendfsync always or --redis-wait-aof (Redis 7.2+) closes the gap"
	case d.Save != "":
		d.Promise = "appendonly no: only RDB snapshots (save " + d.Save + "), so a restart of Redis loses every write since the last snapshot; " +
			"the store notices and refuses writes until an operator accepts it"
	default:
		d.Promise = "no persistence (appendonly no, no save schedule): a restart of Redis loses every write; " +
			"the store notices and refuses writes until an operator accepts it"
	}
	return d
}

func fsyncWhy(d Durability, waitAOF bool) string {
	if waitAOF && d.AppendFsync != "always" {
		return "appendfsync " + d.AppendFsync + ", and every write waits for its fsync with WAITAOF"
	}
	return "appendfsync always"
}

// checkWaitAOF fails unless Redis has WAITAOF (7.2 or later) and
// appendonly is on, for WithWaitAOF.
func (s *Store) checkWaitAOF(ctx context.Context) error {
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redisstore: WithWaitAOF: %w", s.wrap(ctx, err))
	}
	version := "unknown"
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	cmds, err := s.rdb.Do(ctx, "COMMAND", "INFO", "waitaof").Slice()
	if err != nil || len(cmds) == 0 || cmds[0] == nil {
		return fmt.Errorf("redisstore: WithWaitAOF: this Redis (version %s) has no WAITAOF: it needs Redis 7.2 or later; use appendfsync always instead", version)
	}
	if aof, err := s.rdb.ConfigGet(ctx, "appendonly").Result(); err == nil && aof["appendonly"] != "yes" {
		return fmt.Errorf("redisstore: WithWaitAOF: Redis has appendonly %s: WAITAOF waits for an append-only file it does not keep", aof["appendonly"])
	}
	return nil
}
