package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/sdk"
)

// mirror keeps DIR/kv/ in step with every key under the prefix, one batch
// at a time: woken by a change, it reads the space's copy at one revision
// (every change of a transaction, or more) and writes the difference from
// what it wrote last, then wakes --exec once for the whole batch.
type mirror struct {
	a       *agent
	space   *sdk.Space
	wake    chan struct{}
	stop    func()
	written map[string]sdk.Entry // by key: what the files hold
	rev     int64                // the revision they are at
	synced  bool                 // the first sync is done
}

func (a *agent) newMirror(space *sdk.Space) *mirror {
	m := &mirror{a: a, space: space, wake: make(chan struct{}, 1), written: map[string]sdk.Entry{}}
	m.stop = space.OnChange(func(sdk.Change) {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	})
	return m
}

// follow writes each batch until ctx ends.
func (m *mirror) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		m.sync()
	}
}

// sync writes the difference between the space's copy and the files, and
// reports the files it changed as one batch. The first also removes files
// of keys deleted while the agent was away, and says how many keys it
// mirrored.
func (m *mirror) sync() {
	a := m.a
	first := !m.synced
	entries, rev := m.space.Entries()
	var files []string
	now := make(map[string]sdk.Entry, len(entries))
	for _, e := range entries {
		now[e.Key] = e
		if prev, ok := m.written[e.Key]; ok && prev.ModRevision == e.ModRevision && bytes.Equal(prev.Value, e.Value) {
			continue
		}
		if path, ok := m.write(e.Key, e.Value, e.ModRevision, false); ok {
			files = append(files, path)
		}
	}
	for k := range m.written {
		if _, ok := now[k]; !ok {
			if path, ok := m.write(k, nil, rev, true); ok {
				files = append(files, path)
			}
		}
	}
	m.written, m.rev, m.synced = now, rev, true
	if first {
		files = append(files, m.removeStale(entries)...)
		fmt.Fprintf(a.out, "mirrored %d keys under %s at revision %d\n", len(entries), a.o.prefix, rev)
	}
	if len(files) > 0 {
		a.changed("", files...)
	}
}

// write writes or removes one key's file and returns its path; false when
// the key cannot be a file or the write failed (logged).
func (m *mirror) write(key string, value []byte, rev int64, deleted bool) (string, bool) {
	a := m.a
	name, ok := keyFile(a.o.prefix, key)
	if !ok {
		a.log.Warn("a key cannot be a file under the directory; skipped", "key", key)
		return "", false
	}
	path := filepath.Join(a.o.dir, filepath.FromSlash(name))
	var err error
	if deleted {
		if err = a.root.Remove(name); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		err = atomicfile.WriteIn(a.root, name, value, a.o.fileMode)
	}
	if err != nil {
		a.log.Warn("mirroring a key failed", "key", key, "error", err)
		return "", false
	}
	if deleted {
		fmt.Fprintf(a.out, "removed %s at revision %d: %s\n", key, rev, path)
	} else {
		fmt.Fprintf(a.out, "wrote %s at revision %d to %s\n", key, rev, path)
	}
	return path, true
}

// removeStale removes files under DIR/kv/ that are no key of entries
// (keys deleted while the agent was away), walking inside DIR's root: a
// symbolic link is removed, never followed. It returns their paths.
func (m *mirror) removeStale(entries []sdk.Entry) []string {
	a := m.a
	keep := map[string]bool{}
	for _, e := range entries {
		if name, ok := keyFile(a.o.prefix, e.Key); ok {
			keep[name] = true
		}
	}
	var removed []string
	_ = fs.WalkDir(a.root.FS(), kvDir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || keep[name] || atomicfile.IsTemp(name) {
			return nil
		}
		if a.root.Remove(name) == nil {
			path := filepath.Join(a.o.dir, filepath.FromSlash(name))
			fmt.Fprintf(a.out, "removed %s (no longer a key)\n", path)
			removed = append(removed, path)
		}
		return nil
	})
	return removed
}
