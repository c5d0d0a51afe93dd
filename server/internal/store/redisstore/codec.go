package redisstore

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// A record (the current value of a key, in the kv hash) is
//
//	CREATE,MOD,VERSION\n VALUE
//
// and an event (a change, in the log hash, under its revision) is
//
//	TYPE,CREATE,MOD,VERSION,PREV,TIME_MS,KEYLEN\n KEY VALUE
//
// with TYPE P (put) or D (delete), in lower case when more changes of the
// same transaction follow (the feed delivers a transaction whole), and the numbers in decimal: the scripts
// write and parse them with string functions, without a binary library.

// decodeRecord reads a kv record of key.
func decodeRecord(key string, v []byte) (store.KeyValue, error) {
	nl := bytes.IndexByte(v, '\n')
	if nl < 0 {
		return store.KeyValue{}, fmt.Errorf("redisstore: record of %q has no header", key)
	}
	f := bytes.Split(v[:nl], []byte(","))
	if len(f) != 3 {
		return store.KeyValue{}, fmt.Errorf("redisstore: record of %q: header %q", key, v[:nl])
	}
	var n [3]int64
	for i := range f {
		var err error
		if n[i], err = strconv.ParseInt(string(f[i]), 10, 64); err != nil {
			return store.KeyValue{}, fmt.Errorf("redisstore: record of %q: %w", key, err)
		}
	}
	return store.KeyValue{Key: key, Value: bytes.Clone(v[nl+1:]), CreateRevision: n[0], ModRevision: n[1], Version: n[2]}, nil
}

// decodeEvent reads a log event.
func decodeEvent(v []byte) (store.Event, error) {
	nl := bytes.IndexByte(v, '\n')
	if nl < 0 {
		return store.Event{}, fmt.Errorf("redisstore: event has no header")
	}
	f := bytes.Split(v[:nl], []byte(","))
	if len(f) != 7 || len(f[0]) != 1 {
		return store.Event{}, fmt.Errorf("redisstore: event header %q", v[:nl])
	}
	var n [6]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(string(f[i+1]), 10, 64); err != nil {
			return store.Event{}, fmt.Errorf("redisstore: event header %q: %w", v[:nl], err)
		}
	}
	body := v[nl+1:]
	if n[5] < 0 || n[5] > int64(len(body)) {
		return store.Event{}, fmt.Errorf("redisstore: event header %q: key length past the end", v[:nl])
	}
	ev := store.Event{
		KV:           store.KeyValue{Key: string(body[:n[5]]), CreateRevision: n[0], ModRevision: n[1], Version: n[2]},
		PrevRevision: n[3],
		Time:         time.UnixMilli(n[4]),
	}
	switch f[0][0] {
	case 'P', 'p':
		ev.Type = store.EventPut
		ev.KV.Value = bytes.Clone(body[n[5]:])
	case 'D', 'd':
		ev.Type = store.EventDelete
	default:
		return store.Event{}, fmt.Errorf("redisstore: event type %q", f[0])
	}
	ev.More = f[0][0] == 'p' || f[0][0] == 'd'
	return ev, nil
}
