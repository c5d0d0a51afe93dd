package store

import "context"

// eachPageSize is how many keys Each reads per List call.
const eachPageSize = 1000

// Each calls fn for every key with the prefix, in key order, reading the
// current revision page by page (so a long listing is not one snapshot:
// keys written meanwhile may or may not appear). It stops at fn's first
// error and returns it.
func Each(ctx context.Context, s Store, prefix string, fn func(KeyValue) error) error {
	after := ""
	for {
		page, err := s.List(ctx, prefix, 0, after, eachPageSize)
		if err != nil {
			return err
		}
		for _, kv := range page.KVs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !page.More || len(page.KVs) == 0 {
			return nil
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}
