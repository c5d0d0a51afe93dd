package store

import "context"

// eachPageSize is how many keys Each reads per List call.
const eachPageSize = 1000

// Each calls fn for every key with the prefix, in key order, as of the
// current revision. It stops at fn's first error and returns it.
func Each(ctx context.Context, s Store, prefix string, fn func(KeyValue) error) error {
	_, err := EachAt(ctx, s, prefix, 0, fn)
	return err
}

// EachAt calls fn for every key with the prefix, in key order, as of
// revision (0: the current one), and returns the revision read. Every page
// is read at the revision of the first, so a listing longer than a page is
// still one snapshot: a key written meanwhile, wherever it sorts, is in
// none of the pages. It stops at fn's first error and returns it; it fails
// with a *CompactedError if the revision is compacted before the last page.
func EachAt(ctx context.Context, s Store, prefix string, revision int64, fn func(KeyValue) error) (int64, error) {
	after := ""
	for {
		page, err := s.List(ctx, prefix, revision, after, eachPageSize)
		if err != nil {
			return 0, err
		}
		revision = page.Revision
		for _, kv := range page.KVs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !page.More || len(page.KVs) == 0 {
			return revision, nil
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}
