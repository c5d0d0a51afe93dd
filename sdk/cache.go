package sdk

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/sdk/canonical"
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
// written, each file atomically; everything read back is verified again by
// its digest before use, and what fails is ignored.
type diskCache struct {
	dir string
}

func newDiskCache(dir string) *diskCache { return &diskCache{dir: dir} }

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

func (d *diskCache) modulePath(digest string) (string, bool) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", false
	}
	return filepath.Join(d.dir, "validators", hexPart+".wasm"), true
}

// module returns the cached module with this digest, verified, or nil.
func (d *diskCache) module(digest string) []byte {
	path, ok := d.modulePath(digest)
	if !ok {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil || host.Digest(b) != digest {
		return nil
	}
	return b
}

// hasModule reports whether the cache holds a file for the module (not
// verified: a reader of it verifies).
func (d *diskCache) hasModule(digest string) bool {
	path, ok := d.modulePath(digest)
	if !ok {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// putModule keeps a module whose digest was verified.
func (d *diskCache) putModule(digest string, wasm []byte) error {
	path, ok := d.modulePath(digest)
	if !ok {
		return fmt.Errorf("sdk cache: %q is not a sha256 digest", digest)
	}
	return atomicfile.Write(path, wasm, 0o644)
}

func (d *diskCache) releasePath(config string, gen int64) string {
	return filepath.Join(d.dir, "releases", config, strconv.FormatInt(gen, 10)+".json")
}

// release returns a cached release, verified by its content digest, or
// false.
func (d *diskCache) release(config string, gen int64) (cachedRelease, bool) {
	b, err := os.ReadFile(d.releasePath(config, gen))
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

// putRelease keeps a verified, validated release, and keeps at most keep
// releases of its config.
func (d *diskCache) putRelease(r cachedRelease, keep int) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(d.releasePath(r.Config, r.Generation), b, 0o644); err != nil {
		return err
	}
	d.prune(r.Config, keep)
	return nil
}

// prune removes all but the keep newest cached releases of config.
func (d *diskCache) prune(config string, keep int) {
	entries, err := os.ReadDir(filepath.Join(d.dir, "releases", config))
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
		_ = os.Remove(d.releasePath(config, g))
	}
}

func (d *diskCache) appliedPath(config string) string {
	return filepath.Join(d.dir, "applied", config+".json")
}

// setApplied records that s is the config's applied snapshot.
func (d *diskCache) setApplied(s *Snapshot) error {
	b, err := json.Marshal(appliedPointer{Generation: s.Generation, Epoch: s.Epoch, Stage: s.Stage})
	if err != nil {
		return err
	}
	return atomicfile.Write(d.appliedPath(s.Config), b, 0o644)
}

// loadApplied returns the applied snapshot of every config in the cache
// whose release and validator module verify by digest. What does not
// verify is logged and skipped.
func (d *diskCache) loadApplied(log *slog.Logger) []*Snapshot {
	entries, err := os.ReadDir(filepath.Join(d.dir, "applied"))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("pawl: the cache cannot be read", "dir", d.dir, "error", err)
		}
		return nil
	}
	var out []*Snapshot
	for _, e := range entries {
		config, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.dir, "applied", e.Name()))
		var p appliedPointer
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err != nil {
			log.Warn("pawl: a cached applied record is unreadable", "config", config, "error", err)
			continue
		}
		r, ok := d.release(config, p.Generation)
		if !ok {
			log.Warn("pawl: a cached release failed verification and is not used", "config", config, "generation", p.Generation)
			continue
		}
		if d.module(r.ValidatorDigest) == nil {
			log.Warn("pawl: the validator module of a cached release failed verification; the release is not used",
				"config", config, "generation", p.Generation, "validator", r.ValidatorDigest)
			continue
		}
		out = append(out, &Snapshot{
			Config: config, Generation: r.Generation, Epoch: p.Epoch, Stage: p.Stage, ContentDigest: r.ContentDigest,
			ValidatorDigest: r.ValidatorDigest, MediaType: r.MediaType, Content: r.Content, AppliedAt: time.Now(), FromCache: true,
		})
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
	return filepath.Join(d.dir, "spaces", hex.EncodeToString(sum[:])+".json")
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
	return atomicfile.Write(d.spacePath(s.Prefix), b, 0o644)
}

// space returns the cached snapshot of prefix, verified by its checksum,
// or false.
func (d *diskCache) space(prefix string) (cachedSpace, bool) {
	b, err := os.ReadFile(d.spacePath(prefix))
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
