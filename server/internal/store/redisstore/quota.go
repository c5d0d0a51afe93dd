package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// The store's size, against its quota (store.Quota), is counted in the
// key bytes by every script that writes: the bytes of the kv records,
// key list, change-log entries and index members a mutation adds or
// frees, of blobs and of records (their ids, once per hash or set that
// holds them, and their values). It is the logical size of Pawl's data,
// not Redis's memory, which adds its own overhead per entry; Redis's
// maxmemory bounds that. Each script decides its write against the count
// and changes it in the same atomic step, so writers through any number
// of replicas never pass the quota: the count after a write is at most
// what store.PutCost admitted it for. The NOSPACE alarm lives in the key
// alarm (since, used), seen by every replica.

var _ store.UsageReporter = (*Store)(nil)

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// quotaError turns a script's {"QUOTA", used, cost, alarm only} refusal
// into the contract's error.
func (s *Store) quotaError(res reply, reserved bool) error {
	q := s.opts.quota
	return &store.QuotaError{Quota: q.Bytes, Reserve: q.Reserve, Used: res.num(1), Cost: res.num(2), Reserved: reserved, Alarmed: res.str(3) == "1"}
}

// Usage implements store.UsageReporter: one read of the count and the
// alarm. An alarm under the low-water mark, which the next write clears,
// is reported cleared.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	if err := s.check(ctx); err != nil {
		return store.Usage{}, err
	}
	raw, err := usageScript.Run(ctx, s.rdb, []string{s.k.bytes, s.k.alarm}).Slice()
	if err != nil {
		return store.Usage{}, s.wrap(ctx, err)
	}
	res := reply(raw)
	q := s.opts.quota
	u := store.Usage{Used: res.num(0), Quota: q.Bytes, Reserve: q.Reserve}
	if since := res.str(1); since != "" && q.On() && u.Used >= q.LowWater() {
		ms, _ := strconv.ParseInt(since, 10, 64)
		u.Alarm = &store.Alarm{Kind: store.AlarmNoSpace, Since: time.UnixMilli(ms), Used: res.num(2)}
	}
	return u, nil
}
