package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/metrics"
	"github.com/pawlcfg/pawl/server/internal/pagetoken"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// KV is the KVService handler: it validates requests, converts between
// wire and store types, and streams watches from the hub.
type KV struct {
	store         store.Store
	hub           *watch.Hub
	maxValueBytes int
	limits        TxnLimits
	log           *slog.Logger
}

// TxnLimits bound one transaction.
type TxnLimits struct {
	// Ops is the most changes one transaction may make.
	Ops int
	// Bytes is the most bytes of keys and values one transaction may
	// carry.
	Bytes int
}

var _ pawlv1connect.KVServiceHandler = (*KV)(nil)

// NewKV returns a KVService over st and hub that refuses values longer than
// maxValueBytes and transactions past limits.
func NewKV(st store.Store, hub *watch.Hub, maxValueBytes int, limits TxnLimits, log *slog.Logger) *KV {
	return &KV{store: st, hub: hub, maxValueBytes: maxValueBytes, limits: limits, log: log}
}

// listChunk is how many keys one read of a listing takes.
const listChunk = 16

// Txn implements pawl.v1.KVService.Txn.
func (s *KV) Txn(ctx context.Context, req *connect.Request[pawlv1.TxnRequest]) (*connect.Response[pawlv1.TxnResponse], error) {
	m := req.Msg
	ops := m.GetOps()
	switch {
	case len(ops) == 0:
		return nil, InvalidArgument("a transaction needs at least one op")
	case len(ops) > s.limits.Ops:
		return nil, LimitExceeded("--max-txn-ops", uint64(len(ops)), uint64(s.limits.Ops), "ops",
			"the transaction has %d ops; the limit is %d (pawld --max-txn-ops)", len(ops), s.limits.Ops)
	}
	var t store.Txn
	seen := make(map[string]int, len(ops))
	size := 0
	for i, op := range ops {
		key := op.GetKey()
		if err := s.checkWrite(key, nil); err != nil {
			return nil, prefixed(fmt.Sprintf("op %d", i), err)
		}
		if j, dup := seen[key]; dup {
			return nil, InvalidArgument("ops %d and %d both change %s; a transaction changes each key once", j, i, key)
		}
		seen[key] = i
		if op.GetDelete() {
			if len(op.GetValue()) > 0 {
				return nil, InvalidArgument("op %d deletes %s and carries a value; a delete has none", i, key)
			}
			t.Deletes = append(t.Deletes, key)
		} else {
			if len(op.GetValue()) > s.maxValueBytes {
				return nil, sizeLimit("--max-value-bytes", fmt.Sprintf("op %d: the value of %s", i, key), len(op.GetValue()), s.maxValueBytes)
			}
			t.Puts = append(t.Puts, store.Put{Key: key, Value: op.GetValue()})
		}
		size += len(key) + len(op.GetValue())
	}
	if size > s.limits.Bytes {
		return nil, LimitExceeded("--max-txn-bytes", uint64(size), uint64(s.limits.Bytes), "bytes",
			"the transaction carries %d bytes of keys and values; the limit is %d (pawld --max-txn-bytes)", size, s.limits.Bytes)
	}
	for i, c := range m.GetCompares() {
		if err := store.ValidateKey(c.GetKey()); err != nil {
			return nil, prefixed(fmt.Sprintf("compare %d", i), Error(s.log, req.Spec(), err))
		}
		if c.GetModRevision() < 0 {
			return nil, InvalidArgument("compare %d: mod_revision is %d; it must be 0 (key absent) or a revision", i, c.GetModRevision())
		}
		t.Compares = append(t.Compares, store.Compare{Key: c.GetKey(), ModRevision: c.GetModRevision()})
	}
	res, err := s.store.Txn(ctx, t)
	if err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.TxnResponse{Revision: res.Revision}), nil
}

// Put implements pawl.v1.KVService.Put.
func (s *KV) Put(ctx context.Context, req *connect.Request[pawlv1.PutRequest]) (*connect.Response[pawlv1.PutResponse], error) {
	m := req.Msg
	if err := s.checkWrite(m.GetKey(), m.ExpectedModRevision); err != nil {
		return nil, err
	}
	if len(m.GetValue()) > s.maxValueBytes {
		return nil, sizeLimit("--max-value-bytes", "the value", len(m.GetValue()), s.maxValueBytes)
	}
	res, err := s.store.Put(ctx, store.Put{Key: m.GetKey(), Value: m.GetValue(), ExpectModRevision: m.ExpectedModRevision})
	if err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.PutResponse{Revision: res.Revision, PrevKv: toProtoKVPtr(res.Prev)}), nil
}

// Get implements pawl.v1.KVService.Get.
func (s *KV) Get(ctx context.Context, req *connect.Request[pawlv1.GetRequest]) (*connect.Response[pawlv1.GetResponse], error) {
	m := req.Msg
	if err := store.ValidateKey(m.GetKey()); err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	if err := checkRevision("revision", m.GetRevision()); err != nil {
		return nil, err
	}
	kv, at, err := s.store.Get(ctx, m.GetKey(), m.GetRevision())
	if err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.GetResponse{Kv: toProtoKV(kv), Revision: at}), nil
}

// Delete implements pawl.v1.KVService.Delete.
func (s *KV) Delete(ctx context.Context, req *connect.Request[pawlv1.DeleteRequest]) (*connect.Response[pawlv1.DeleteResponse], error) {
	m := req.Msg
	if err := s.checkWrite(m.GetKey(), m.ExpectedModRevision); err != nil {
		return nil, err
	}
	res, err := s.store.Delete(ctx, store.Delete{Key: m.GetKey(), ExpectModRevision: m.ExpectedModRevision})
	if err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.DeleteResponse{Revision: res.Revision, PrevKv: toProtoKVPtr(res.Prev)}), nil
}

// List implements pawl.v1.KVService.List.
func (s *KV) List(ctx context.Context, req *connect.Request[pawlv1.ListRequest]) (*connect.Response[pawlv1.ListResponse], error) {
	m := req.Msg
	if err := store.ValidatePrefix(m.GetPrefix()); err != nil {
		return nil, Error(s.log, req.Spec(), err)
	}
	if err := checkRevision("revision", m.GetRevision()); err != nil {
		return nil, err
	}
	size, err := PageSize(m.GetPageSize())
	if err != nil {
		return nil, err
	}
	revision, after := m.GetRevision(), ""
	if m.GetPageToken() != "" {
		tok, err := pagetoken.Decode(m.GetPageToken())
		if err != nil || tok.Scope != m.GetPrefix() {
			return nil, InvalidArgument("page_token is not a token of a listing of prefix %q; start again without it", m.GetPrefix())
		}
		revision, after = tok.Revision, tok.After
	}
	// The page is read a few keys at a time, all at the revision of the
	// first read, until it has size keys or MaxPageBytes of keys and
	// values: a page of large values ends early, and the server never
	// holds more than about a page.
	resp := &pawlv1.ListResponse{}
	bytes, more := 0, true
	for len(resp.Kvs) < size && more && bytes < MaxPageBytes {
		page, err := s.store.List(ctx, m.GetPrefix(), revision, after, min(listChunk, size-len(resp.Kvs)))
		if err != nil {
			return nil, Error(s.log, req.Spec(), err)
		}
		revision, resp.Revision, more = page.Revision, page.Revision, page.More
		for _, kv := range page.KVs {
			if bytes >= MaxPageBytes {
				more = true // page.KVs[i:] are next
				break
			}
			resp.Kvs = append(resp.Kvs, toProtoKV(kv))
			bytes += len(kv.Key) + len(kv.Value)
			after = kv.Key
		}
	}
	if more {
		resp.NextPageToken = pagetoken.Token{Scope: m.GetPrefix(), Revision: resp.Revision, After: after}.Encode()
	}
	return connect.NewResponse(resp), nil
}

// Watch implements pawl.v1.KVService.Watch. The stream ends with no error
// after a WatchCompacted message, and with Unavailable when the server shuts
// down.
func (s *KV) Watch(ctx context.Context, req *connect.Request[pawlv1.WatchRequest], stream *connect.ServerStream[pawlv1.WatchResponse]) error {
	m := req.Msg
	if err := store.ValidatePrefix(m.GetPrefix()); err != nil {
		return Error(s.log, req.Spec(), err)
	}
	if err := checkRevision("start_revision", m.GetStartRevision()); err != nil {
		return err
	}
	st, err := s.store.Status(ctx)
	if err != nil {
		return Error(s.log, req.Spec(), err)
	}
	if seen := m.GetIncarnation(); seen != "" && st.Incarnation != "" && seen != st.Incarnation {
		// Another history (a restored backup): the client's revisions
		// name other changes here, or none yet. It lists and starts over.
		return sendIncarnationChanged(stream, st)
	}
	w, err := s.hub.Watch(ctx, m.GetPrefix(), m.GetStartRevision())
	var compacted *store.CompactedError
	if errors.As(err, &compacted) {
		return sendCompacted(stream, compacted)
	}
	if err != nil {
		return Error(s.log, req.Spec(), err)
	}
	defer w.Close()
	lag := metrics.FromContext(ctx)
	started := &pawlv1.WatchStarted{Revision: w.StartedAt(), Incarnation: st.Incarnation}
	if err := stream.Send(&pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Started{Started: started}}); err != nil {
		return err
	}
	for {
		batch, err := w.Next(ctx)
		if errors.As(err, &compacted) {
			return sendCompacted(stream, compacted)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // the client went away
			}
			return Error(s.log, req.Spec(), err)
		}
		if err := stream.Send(toProtoBatch(batch)); err != nil {
			return err
		}
		if n := len(batch.Events); n > 0 && batch.Events[n-1].Revision() > st.Revision {
			// Changes committed before the stream started are history
			// replayed, not fan-out.
			lag.FanoutLag(time.Since(batch.Events[n-1].Time))
		}
	}
}

func sendCompacted(stream *connect.ServerStream[pawlv1.WatchResponse], c *store.CompactedError) error {
	return stream.Send(compactedMessage(c))
}

// compactedMessage tells a watcher that the revision it needs was
// compacted: it takes a snapshot and watches again from there.
func compactedMessage(c *store.CompactedError) *pawlv1.WatchResponse {
	return &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Compacted{Compacted: &pawlv1.WatchCompacted{
		CompactRevision:  c.CompactRevision,
		SnapshotRevision: c.Revision,
		Reason:           pawlv1.WatchResyncReason_WATCH_RESYNC_REASON_COMPACTED,
	}}}
}

// sendIncarnationChanged tells a watcher that resumed with another
// incarnation than the store's to take a snapshot at the store's current
// revision: WatchStarted with the incarnation to resume with, then
// WatchCompacted with the reason (incarnationChanged).
func sendIncarnationChanged(stream *connect.ServerStream[pawlv1.WatchResponse], st store.Status) error {
	started := &pawlv1.WatchStarted{Revision: st.Revision, Incarnation: st.Incarnation}
	if err := stream.Send(&pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Started{Started: started}}); err != nil {
		return err
	}
	return stream.Send(incarnationChanged(st))
}

// incarnationChanged is the WatchCompacted that follows the WatchStarted
// of a watcher that resumed with another incarnation than the store's.
func incarnationChanged(st store.Status) *pawlv1.WatchResponse {
	return &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Compacted{Compacted: &pawlv1.WatchCompacted{
		CompactRevision:  st.CompactRevision,
		SnapshotRevision: st.Revision,
		Reason:           pawlv1.WatchResyncReason_WATCH_RESYNC_REASON_INCARNATION_CHANGED,
	}}}
}

func (s *KV) checkWrite(key string, expect *int64) error {
	if err := store.ValidateKey(key); err != nil {
		return Error(s.log, connect.Spec{}, err)
	}
	if strings.HasPrefix(key, store.SystemPrefix) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"keys under %s are Pawl's own records (releases, pointers, receipts); they can be read but change only through their services", store.SystemPrefix))
	}
	if expect != nil && *expect < 0 {
		return InvalidArgument("expected_mod_revision is %d; it must be 0 (key absent) or a revision", *expect)
	}
	return nil
}

func checkRevision(field string, rev int64) error {
	if rev < 0 {
		return InvalidArgument("%s is %d; it must be 0 (current) or a positive revision", field, rev)
	}
	return nil
}

func toProtoKV(kv store.KeyValue) *pawlv1.KeyValue {
	return &pawlv1.KeyValue{
		Key:            kv.Key,
		Value:          kv.Value,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
	}
}

func toProtoKVPtr(kv *store.KeyValue) *pawlv1.KeyValue {
	if kv == nil {
		return nil
	}
	return toProtoKV(*kv)
}

func toProtoBatch(b watch.Batch) *pawlv1.WatchResponse {
	if len(b.Events) == 0 && b.Stale != "" {
		return &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Stale{Stale: &pawlv1.WatchStale{Revision: b.Progress, Reason: b.Stale}}}
	}
	if len(b.Events) == 0 {
		return &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Progress{Progress: &pawlv1.WatchProgress{Revision: b.Progress}}}
	}
	events := make([]*pawlv1.Event, len(b.Events))
	for i, ev := range b.Events {
		events[i] = &pawlv1.Event{Type: toProtoType(ev.Type), Kv: toProtoKV(ev.KV), PrevRevision: ev.PrevRevision}
	}
	return &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Events{Events: &pawlv1.WatchEvents{Events: events}}}
}

func toProtoType(t store.EventType) pawlv1.EventType {
	switch t {
	case store.EventPut:
		return pawlv1.EventType_EVENT_TYPE_PUT
	case store.EventDelete:
		return pawlv1.EventType_EVENT_TYPE_DELETE
	}
	panic(fmt.Sprintf("api: unknown event type %d", t))
}

// prefixed puts what part of a request a Connect error is about in front
// of its message, keeping its code.
func prefixed(what string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	return connect.NewError(ce.Code(), fmt.Errorf("%s: %s", what, ce.Message()))
}
