package sdk

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/sdk/configid"
	"github.com/pawlcfg/pawl/validators/host"
)

// diskCache is the last known good state on disk:
//
//	validators/<hex>.wasm          modules, named by their sha256
//	compiled/                      the validator runtime's compiled code
//	releases/<config>/<gen>.json   verified and validated releases
//	applied/<config>.json          which generation each config last applied
//	spaces/<sha256 of prefix>.json key space snapshots, with a checksum
//
// Only what passed verification (and, for releases, validation) is ever
// written, each file atomically, with mode 0600 in directories of mode
// 0700; everything read back is verified again by its digest before use,
// and what fails is ignored. A config ID or generation becomes a path only
// after configid accepts it, and every file is reached through an os.Root
// on the directory, so neither a name from the network nor a symbolic link
// planted in the directory can lead outside it.
//
// The cache is not its own authority: whoever can write it can rewrite a
// release together with its digest. So a cached release is used only
// once its validator (a module verified by its sha256) accepted it again
// (loadApplied's callers), and, when the server is up, only when it has the
// digests the assignment names (Client.download); otherwise it is dropped.
type diskCache struct {
	dir  string
	root *os.Root
}

// cacheFileMode is the mode of every file in the cache; its directories
// get 0700 (atomicfile.DirMode).
const cacheFileMode = 0o600

// openDiskCache opens (creating it if needed) the cache directory dir,
// which only the process's user may read: its mode is set to 0700.
func openDiskCache(dir string) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sdk: cache directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sdk: cache directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("sdk: cache directory: %w", err)
	}
	return &diskCache{dir: dir, root: root}, nil
}

// close releases the directory.
func (d *diskCache) close() error { return d.root.Close() }

func (d *diskCache) compiledDir() string { return filepath.Join(d.dir, "compiled") }

// cachedRelease is a verified release as the cache keeps it.
type cachedRelease struct {
	Config          string        `json:"config"`
	Generation      int64         `json:"generation"`
	ContentDigest   string        `json:"content_digest"`
	ValidatorDigest string        `json:"validator_digest"`
	MediaType       string        `json:"media_type"`
	Content         []byte        `json:"content"`
	Params          []byte        `json:"params,omitempty"`
	HealthWindow    time.Duration `json:"health_window"`
	MinAppVersion   string        `json:"min_app_version,omitempty"`
	// Budgets are the health budgets of the plan's stages, by stage name
	// (stages without one are absent), which the SDK judges after the
	// health window.
	Budgets map[string]*budget `json:"budgets,omitempty"`
}

// appliedPointer says which generation of a config was last applied.
type appliedPointer struct {
	Generation int64  `json:"generation"`
	Epoch      int64  `json:"epoch"`
	Stage      string `json:"stage,omitempty"`
}

// modulePath returns the module's file, relative to the cache.
func (d *diskCache) modulePath(digest string) (string, bool) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", false
	}
	return path.Join("validators", hexPart+".wasm"), true
}

// module returns the cached module with this digest, verified, or nil.
func (d *diskCache) module(digest string) []byte {
	name, ok := d.modulePath(digest)
	if !ok {
		return nil
	}
	b, err := d.root.ReadFile(name)
	if err != nil || host.Digest(b) != digest {
		return nil
	}
	return b
}

// hasModule reports whether the cache holds a file for the module (not
// verified: a reader of it verifies).
func (d *diskCache) hasModule(digest string) bool {
	name, ok := d.modulePath(digest)
	if !ok {
		return false
	}
	_, err := d.root.Stat(name)
	return err == nil
}

// putModule keeps a module whose digest was verified.
func (d *diskCache) putModule(digest string, wasm []byte) error {
	name, ok := d.modulePath(digest)
	if !ok {
		return fmt.Errorf("sdk cache: %q is not a sha256 digest", digest)
	}
	return atomicfile.WriteIn(d.root, name, wasm, cacheFileMode)
}

// releasePath returns the release's file, relative to the cache, or an
// error when config or gen cannot name one.
func (d *diskCache) releasePath(config string, gen int64) (string, error) {
	if err := errors.Join(configid.Check(config), configid.CheckGeneration(gen)); err != nil {
		return "", fmt.Errorf("sdk cache: %w", err)
	}
	return path.Join("releases", config, strconv.FormatInt(gen, 10)+".json"), nil
}

// release returns a cached release, verified by its content digest, or
// false. The digest is the cache's own: see diskCache for what makes the
// release trusted.
func (d *diskCache) release(config string, gen int64) (cachedRelease, bool) {
	name, err := d.releasePath(config, gen)
	if err != nil {
		return cachedRelease{}, false
	}
	b, err := d.root.ReadFile(name)
	if err != nil {
		return cachedRelease{}, false
	}
	var r cachedRelease
	if err := json.Unmarshal(b, &r); err != nil || r.Config != config || r.Generation != gen {
		return cachedRelease{}, false
	}
	if digest, err := canonical.Digest(r.MediaType, r.Content); err != nil || digest != r.ContentDigest {
		return cachedRelease{}, false
	}
	return r, true
}

// dropRelease removes a cached release, and the config's applied record
// when it names that generation, so it is never offered again.
func (d *diskCache) dropRelease(config string, gen int64) {
	name, err := d.releasePath(config, gen)
	if err != nil {
		return
	}
	_ = d.root.Remove(name)
	if p, ok := d.applied(config); ok && p.Generation == gen {
		_ = d.root.Remove(d.appliedPath(config))
	}
}

// putRelease keeps a verified, validated release, and keeps at most keep
// releases of its config.
func (d *diskCache) putRelease(r cachedRelease, keep int) error {
	name, err := d.releasePath(r.Config, r.Generation)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteIn(d.root, name, b, cacheFileMode); err != nil {
		return err
	}
	d.prune(r.Config, keep)
	return nil
}

// readDir lists a directory of the cache, or returns nil.
func (d *diskCache) readDir(name string) ([]os.DirEntry, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// prune removes all but the keep newest cached releases of config, which
// configid accepted.
func (d *diskCache) prune(config string, keep int) {
	entries, err := d.readDir(path.Join("releases", config))
	if err != nil {
		return
	}
	var gens []int64
	for _, e := range entries {
		if g, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".json"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".json") {
			gens = append(gens, g)
		}
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] > gens[j] })
	for _, g := range gens[min(keep, len(gens)):] {
		if name, err := d.releasePath(config, g); err == nil {
			_ = d.root.Remove(name)
		}
	}
}

// appliedPath returns the config's applied record, relative to the cache;
// config must have passed configid.Check.
func (d *diskCache) appliedPath(config string) string {
	return path.Join("applied", config+".json")
}

// setApplied records that s is the config's applied snapshot.
func (d *diskCache) setApplied(s *Snapshot) error {
	if err := errors.Join(configid.Check(s.Config), configid.CheckGeneration(s.Generation)); err != nil {
		return fmt.Errorf("sdk cache: %w", err)
	}
	b, err := json.Marshal(appliedPointer{Generation: s.Generation, Epoch: s.Epoch, Stage: s.Stage})
	if err != nil {
		return err
	}
	return atomicfile.WriteIn(d.root, d.appliedPath(s.Config), b, cacheFileMode)
}

// applied reads the config's applied record.
func (d *diskCache) applied(config string) (appliedPointer, bool) {
	var p appliedPointer
	if !configid.Valid(config) {
		return p, false
	}
	b, err := d.root.ReadFile(d.appliedPath(config))
	if err != nil || json.Unmarshal(b, &p) != nil {
		return p, false
	}
	return p, true
}

// cachedApply is a config's last applied release as the cache holds it,
// verified by its own digests but not validated yet.
type cachedApply struct {
	pointer appliedPointer
	release cachedRelease
	module  []byte
}

// snapshot is what the application is served of a, once validated.
func (a cachedApply) snapshot() *Snapshot {
	r := a.release
	return &Snapshot{
		Config: r.Config, Generation: r.Generation, Epoch: a.pointer.Epoch, Stage: a.pointer.Stage, ContentDigest: r.ContentDigest,
		ValidatorDigest: r.ValidatorDigest, MediaType: r.MediaType, Content: r.Content, AppliedAt: time.Now(), FromCache: true,
	}
}

// loadApplied returns the last applied release of every config in the
// cache whose release and validator module verify by digest, with the
// module, for the caller to validate. What does not verify is logged and
// skipped.
func (d *diskCache) loadApplied(log *slog.Logger) []cachedApply {
	entries, err := d.readDir("applied")
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("pawl: the cache cannot be read", "dir", d.dir, "error", err)
		}
		return nil
	}
	var out []cachedApply
	for _, e := range entries {
		config, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || atomicfile.IsTemp(e.Name()) {
			continue
		}
		if err := configid.Check(config); err != nil {
			log.Warn("pawl: a cached applied record has a name no config can have; skipped", "file", e.Name(), "error", err)
			continue
		}
		p, ok := d.applied(config)
		if !ok {
			log.Warn("pawl: a cached applied record is unreadable", "config", config)
			continue
		}
		r, ok := d.release(config, p.Generation)
		if !ok {
			log.Warn("pawl: a cached release failed verification and is not used", "config", config, "generation", p.Generation)
			continue
		}
		module := d.module(r.ValidatorDigest)
		if module == nil {
			log.Warn("pawl: the validator module of a cached release failed verification; the release is not used",
				"config", config, "generation", p.Generation, "validator", r.ValidatorDigest)
			continue
		}
		out = append(out, cachedApply{pointer: p, release: r, module: module})
	}
	return out
}

// cachedSpace is a key space snapshot as the cache keeps it; Checksum is
// the sha256 of the rest, encoded without it.
type cachedSpace struct {
	Prefix   string  `json:"prefix"`
	Revision int64   `json:"revision"`
	Entries  []Entry `json:"entries"`
	Checksum string  `json:"checksum,omitempty"`
}

func (d *diskCache) spacePath(prefix string) string {
	sum := sha256.Sum256([]byte(prefix))
	return path.Join("spaces", hex.EncodeToString(sum[:])+".json")
}

func spaceChecksum(s cachedSpace) (string, error) {
	s.Checksum = ""
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// putSpace keeps a space snapshot.
func (d *diskCache) putSpace(s cachedSpace) error {
	sum, err := spaceChecksum(s)
	if err != nil {
		return err
	}
	s.Checksum = sum
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.WriteIn(d.root, d.spacePath(s.Prefix), b, cacheFileMode)
}

// space returns the cached snapshot of prefix, verified by its checksum,
// or false.
func (d *diskCache) space(prefix string) (cachedSpace, bool) {
	b, err := d.root.ReadFile(d.spacePath(prefix))
	if err != nil {
		return cachedSpace{}, false
	}
	var s cachedSpace
	if err := json.Unmarshal(b, &s); err != nil || s.Prefix != prefix {
		return cachedSpace{}, false
	}
	if sum, err := spaceChecksum(s); err != nil || sum != s.Checksum {
		return cachedSpace{}, false
	}
	return s, true
}
