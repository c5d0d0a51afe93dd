package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// cutPolicy says what a power cut does with the changes not synced.
type cutPolicy int

const (
	// loseAll loses every change not synced: the strictest disk.
	loseAll cutPolicy = iota
	// keepSome keeps, loses or tears each at random.
	keepSome
	// keepNewest keeps only the newest change of each file and of the
	// directory: a disk that wrote them out of order.
	keepNewest
)

func (p cutPolicy) String() string { return [...]string{"lose all", "keep some", "keep the newest"}[p] }

// errPowerCut is what every file operation returns after a simulated
// power cut.
var errPowerCut = errors.New("crashfs: the power was cut")

// crashFS is a file system in memory that can cut the power (of one
// directory, the log's: files are named by their base names, so that a
// disk can be opened again under another data directory): it keeps,
// beside what the files and directories hold now, what they would hold
// after a power cut (what was synced), and the changes made since, each
// of which the cut may lose. A write not yet synced is lost, kept or
// torn (some of its 512-byte sectors written, the others not); a
// creation, rename or removal not yet synced by a sync of its directory
// is lost or kept, in order; the policy decides which. The cut happens at the cutAt-th operation
// that changes something (a write, allocation, sync, creation, rename,
// removal or directory sync): a write there is torn, a sync there never
// happens, and every later operation fails.
type crashFS struct {
	mu    sync.Mutex
	names map[string]*inode // path -> file, now
	// durableNames is what the directories hold after a cut: the state
	// at their last sync, then the changes since, which a cut may lose.
	durableNames map[string]*inode
	dirOps       []dirOp
	ops          int
	cutAt        int // 0: never
	cut          bool
	policy       cutPolicy
	rng          *rand.Rand
	after        *crashFS // what the disk holds after the cut
	trace        []string // the operations counted, described
}

// inode is a file: its bytes now, its bytes at its last sync, and the
// changes since.
type inode struct {
	data    []byte
	durable []byte
	pending []fileOp
}

// fileOp is a write (data at off) or a change of size (resize).
type fileOp struct {
	off    int64
	data   []byte
	resize bool
	size   int64
}

// dirOp is a creation (ino set), a removal or a rename (to set) of path.
type dirOp struct {
	path string
	to   string
	ino  *inode
}

func newCrashFS(cutAt int, policy cutPolicy, seed uint64) *crashFS {
	return &crashFS{
		names:        map[string]*inode{},
		durableNames: map[string]*inode{},
		cutAt:        cutAt,
		policy:       policy,
		rng:          rand.New(rand.NewPCG(seed, 1)),
	}
}

// powerCut returns what the disk holds after the cut, as a new crashFS
// that cuts at its cutAt-th operation (0: never), or nil if no cut
// happened.
func (c *crashFS) powerCut() *crashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.after
}

// restart returns a copy of c as its disk holds it after the cut, that
// cuts the power again at its cutAt-th operation.
func (c *crashFS) restart(cutAt int, policy cutPolicy, seed uint64) *crashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := newCrashFS(cutAt, policy, seed)
	for path, ino := range c.names {
		d := append([]byte(nil), ino.data...)
		r.names[path] = &inode{data: d, durable: append([]byte(nil), d...)}
		r.durableNames[path] = r.names[path]
	}
	return r
}

// opLocked counts an operation that changes something, and cuts the power
// when it is the cutAt-th. It reports whether the operation may go on.
// The caller holds c.mu; tear says the operation is a write to be torn
// if the cut comes at it (it is added to its file's pending changes
// first).
func (c *crashFS) opLocked(what string, tear func()) error {
	if c.cut {
		return errPowerCut
	}
	c.ops++
	c.trace = append(c.trace, what)
	if c.ops != c.cutAt {
		return nil
	}
	if tear != nil {
		tear()
	}
	c.cut = true
	c.after = c.imageLocked()
	return errPowerCut
}

// imageLocked computes what the disk holds after a cut now.
func (c *crashFS) imageLocked() *crashFS {
	img := newCrashFS(0, loseAll, 0)
	names := make(map[string]*inode, len(c.durableNames))
	for p, ino := range c.durableNames {
		names[p] = ino
	}
	for i, op := range c.dirOps {
		if !c.keepLocked(i, len(c.dirOps)) {
			continue
		}
		switch {
		case op.ino != nil:
			names[op.path] = op.ino
		case op.to != "":
			if ino, ok := names[op.path]; ok {
				names[op.to] = ino
				delete(names, op.path)
			}
		default:
			delete(names, op.path)
		}
	}
	// Each file once, however many names it has.
	images := map[*inode]*inode{}
	paths := make([]string, 0, len(names))
	for p := range names {
		paths = append(paths, p)
	}
	sort.Strings(paths) // the random choices in a fixed order
	for _, p := range paths {
		ino := names[p]
		if images[ino] == nil {
			d := c.fileAfterCutLocked(ino)
			images[ino] = &inode{data: d, durable: append([]byte(nil), d...)}
		}
		img.names[p] = images[ino]
		img.durableNames[p] = images[ino]
	}
	return img
}

// fileAfterCutLocked is what ino holds after a cut: its synced bytes,
// then each change since, kept, lost or (a write) torn by sectors.
func (c *crashFS) fileAfterCutLocked(ino *inode) []byte {
	d := append([]byte(nil), ino.durable...)
	for i, op := range ino.pending {
		if op.resize {
			if c.keepLocked(i, len(ino.pending)) {
				d = resize(d, op.size)
			}
			continue
		}
		for s := op.off &^ (sectorSize - 1); s < op.off+int64(len(op.data)); s += sectorSize {
			if !c.keepLocked(i, len(ino.pending)) {
				continue
			}
			from, to := max(s, op.off), min(s+sectorSize, op.off+int64(len(op.data)))
			if int64(len(d)) < to {
				d = resize(d, to)
			}
			copy(d[from:to], op.data[from-op.off:to-op.off])
		}
	}
	return d
}

// keepLocked says whether a cut keeps the i-th of n changes not synced
// (of a file, or of the directory), or a sector of it.
func (c *crashFS) keepLocked(i, n int) bool {
	switch c.policy {
	case keepSome:
		return c.rng.IntN(2) == 0
	case keepNewest:
		return i == n-1
	}
	return false
}

func resize(b []byte, size int64) []byte {
	if int64(len(b)) >= size {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func (c *crashFS) MkdirAll(string) error { return nil }

func (c *crashFS) ReadDir(string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for p := range c.names {
		names = append(names, p)
	}
	sort.Strings(names)
	return names, nil
}

func (c *crashFS) ReadFile(path string) ([]byte, error) {
	path = filepath.Base(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	ino, ok := c.names[path]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fs.ErrNotExist}
	}
	return append([]byte(nil), ino.data...), nil
}

func (c *crashFS) OpenFile(path string, flag int) (walFile, error) {
	path = filepath.Base(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	ino, ok := c.names[path]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	case !ok:
		if err := c.opLocked("create "+filepath.Base(path), nil); err != nil {
			return nil, err
		}
		ino = &inode{}
		c.names[path] = ino
		c.dirOps = append(c.dirOps, dirOp{path: path, ino: ino})
	case flag&os.O_TRUNC != 0:
		if err := c.opLocked("truncate "+filepath.Base(path), nil); err != nil {
			return nil, err
		}
		ino.data = ino.data[:0]
		ino.pending = append(ino.pending, fileOp{resize: true})
	}
	return &crashFile{fs: c, ino: ino, name: filepath.Base(path)}, nil
}

func (c *crashFS) Rename(from, to string) error {
	from, to = filepath.Base(from), filepath.Base(to)
	c.mu.Lock()
	defer c.mu.Unlock()
	ino, ok := c.names[from]
	if !ok {
		return &fs.PathError{Op: "rename", Path: from, Err: fs.ErrNotExist}
	}
	if err := c.opLocked("rename "+filepath.Base(from)+" "+filepath.Base(to), nil); err != nil {
		return err
	}
	c.names[to] = ino
	delete(c.names, from)
	c.dirOps = append(c.dirOps, dirOp{path: from, to: to})
	return nil
}

func (c *crashFS) Remove(path string) error {
	path = filepath.Base(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.names[path]; !ok {
		return &fs.PathError{Op: "remove", Path: path, Err: fs.ErrNotExist}
	}
	if err := c.opLocked("remove "+filepath.Base(path), nil); err != nil {
		return err
	}
	delete(c.names, path)
	c.dirOps = append(c.dirOps, dirOp{path: path})
	return nil
}

func (c *crashFS) SyncDir(string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.opLocked("sync dir", nil); err != nil {
		return err
	}
	for _, op := range c.dirOps {
		switch {
		case op.ino != nil:
			c.durableNames[op.path] = op.ino
		case op.to != "":
			if ino, ok := c.durableNames[op.path]; ok {
				c.durableNames[op.to] = ino
				delete(c.durableNames, op.path)
			}
		default:
			delete(c.durableNames, op.path)
		}
	}
	c.dirOps = nil
	return nil
}

// crashFile is an open file of a crashFS.
type crashFile struct {
	fs   *crashFS
	ino  *inode
	name string
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	op := fileOp{off: off, data: append([]byte(nil), p...)}
	if err := f.fs.opLocked(fmt.Sprintf("write %s %d+%d", f.name, off, len(p)), func() { f.ino.pending = append(f.ino.pending, op) }); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); int64(len(f.ino.data)) < end {
		f.ino.data = resize(f.ino.data, end)
	}
	copy(f.ino.data[off:], p)
	f.ino.pending = append(f.ino.pending, op)
	return len(p), nil
}

func (f *crashFile) Allocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.opLocked("allocate "+f.name, nil); err != nil {
		return err
	}
	if int64(len(f.ino.data)) < size {
		f.ino.data = resize(f.ino.data, size)
		f.ino.pending = append(f.ino.pending, fileOp{resize: true, size: size})
	}
	return nil
}

func (f *crashFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.opLocked("sync "+f.name, nil); err != nil {
		return err
	}
	f.ino.durable = append(f.ino.durable[:0], f.ino.data...)
	f.ino.pending = nil
	return nil
}

// DataSync is Sync: fdatasync writes the file's size too when reading
// the data back needs it, and a cut loses nothing else of it here.
func (f *crashFile) DataSync() error { return f.Sync() }

func (f *crashFile) Close() error { return nil }
