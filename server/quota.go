package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// DefaultQuotaBytes is the storage quota unless told otherwise: 8 GiB,
// etcd's largest recommended --quota-backend-bytes, far above what a
// configuration store holds, and below what fills a small disk or a
// Redis of modest memory without warning.
const DefaultQuotaBytes = 8 << 30

// quotaCheckInterval is how often the server reads the store's usage to
// log the NOSPACE alarm when it is raised and when it clears: an alarm
// raised by another replica of a shared store is logged here too.
const quotaCheckInterval = 10 * time.Second

// StorageUsage is the store's size against its quota.
type StorageUsage struct {
	// UsedBytes is the store's size as counted against the quota: bbolt's
	// pages in use (its file up to the high-water mark, less its free
	// pages) and the changes its write-ahead log holds ahead of it, for
	// the embedded store; the bytes of Pawl's records, counted in Redis,
	// for a Redis store.
	UsedBytes int64
	// QuotaBytes is the quota (WithQuota); 0 when there is none.
	QuotaBytes int64
	// ReserveBytes is how far past the quota reports may still go.
	ReserveBytes int64
	// NoSpace is set while the NOSPACE alarm is raised: writes that add
	// bytes are refused.
	NoSpace bool
	// NoSpaceSince is when the alarm was raised.
	NoSpaceSince time.Time
}

// StorageUsage returns the store's size, its quota and whether the NOSPACE
// alarm is raised: what the Status RPC reports, and what metrics read.
// It is cheap (counters for the embedded store, one Redis round trip for
// a shared one) and safe for concurrent use.
func (s *Server) StorageUsage(ctx context.Context) (StorageUsage, error) {
	u, err := s.usage.Usage(ctx)
	if err != nil {
		return StorageUsage{}, fmt.Errorf("server: storage usage: %w", err)
	}
	out := StorageUsage{UsedBytes: u.Used, QuotaBytes: u.Quota, ReserveBytes: u.Reserve}
	if u.Alarm != nil {
		out.NoSpace, out.NoSpaceSince = true, u.Alarm.Since
	}
	return out, nil
}

// storeQuota is the quota the store enforces: a tenth of it again is the
// reserve of the writes that a fleet in an incident must still land.
func storeQuota(bytes int64) store.Quota {
	return store.Quota{Bytes: bytes, Reserve: bytes / 10, Reserved: reservedKey}
}

// reservedKey says whether a put of key may use the quota's reserve:
// instances' registrations and reports (ACKs, applied records, evidence)
// and the records that move a rollout (pointer, receipts, progress,
// stops, retirements, revocations), so that a full store still counts a
// fleet's ACKs and lets an operator promote, roll back and stop. New
// releases and user keys may not.
func reservedKey(key string) bool {
	for _, p := range append(records.ReportPrefixes, records.InstancesPrefix) {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	rest, ok := strings.CutPrefix(key, records.ConfigsPrefix)
	if !ok {
		return false
	}
	_, kind, ok := strings.Cut(rest, "/") // config IDs hold no "/"
	if !ok {
		return false
	}
	for _, k := range []string{"active", "receipts/", "progress/", "stops/", "retired/", "revoked/"} {
		if kind == k || (strings.HasSuffix(k, "/") && strings.HasPrefix(kind, k)) {
			return true
		}
	}
	return false
}

// watchQuota logs the NOSPACE alarm when it is raised and when it
// clears, reading the usage every interval, until ctx ends.
func (s *Server) watchQuota(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	raised := false
	for {
		u, err := s.usage.Usage(ctx)
		switch {
		case err != nil:
			// The store's own errors are logged where they matter.
		case u.Alarm != nil && !raised:
			s.cfg.log.Error("NOSPACE alarm: the store reached its storage quota; writes that add bytes are refused until deletes and compaction take it under nine tenths of the quota (or raise --quota-bytes)",
				"used_bytes", u.Used, "quota_bytes", u.Quota, "since", u.Alarm.Since)
			raised = true
		case u.Alarm == nil && raised:
			s.cfg.log.Info("NOSPACE alarm cleared: the store is under nine tenths of its storage quota, and writes are accepted again",
				"used_bytes", u.Used, "quota_bytes", u.Quota)
			raised = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
