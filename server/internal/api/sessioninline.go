package api

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// maxInlineReleaseBytes is about the most bytes of releases (as
// marshaled) that one SessionResponse carries with its assignments
// (SessionHello.inline_releases); a release that does not fit is left
// out, and the instance downloads it. The writer counts them against the
// message's bound (maxSessionMessageBytes) too, with the watches' events.
const maxInlineReleaseBytes = 1 << 20

// inlineReleases builds the releases that sessions send with their
// assignments, once per release for every session: a promotion to
// 10,000 instances then builds one message of its release, not 10,000,
// and no instance calls GetRelease. A release's spec, content and digest
// never change, and its state and revision (which do) are left out, so a
// built release is good for as long as it is kept. It keeps at most
// maxInlineKeptBytes of them (a fleet's assignments at one time name far
// fewer); when that would be passed it starts over. A release too large
// to ever go inline is kept as such, without its content.
type inlineReleases struct {
	releases *release.Releases
	mu       sync.Mutex
	built    map[inlineKey]builtRelease
	bytes    int
}

// maxInlineKeptBytes bounds the bytes of the releases inlineReleases
// keeps built.
const maxInlineKeptBytes = 64 << 20

// inlineKey names a release by its digest too: a store restored from a
// backup may hold another content at the same generation.
type inlineKey struct {
	config, digest string
	gen            int64
}

// builtRelease is a release as sessions send it, with its marshaled
// size; rel is nil for one too large to go inline.
type builtRelease struct {
	rel  *pawlv1.Release
	size int
}

func newInlineReleases(r *release.Releases) *inlineReleases {
	return &inlineReleases{releases: r, built: map[inlineKey]builtRelease{}}
}

// get returns the release config gen with the content digest as
// sessions send it (shared, so never to be changed) and its marshaled
// size. ok is false when it cannot be read now, has another digest, or
// is too large to go inline; the instance then downloads it, and that
// call reports why.
func (r *inlineReleases) get(ctx context.Context, config string, gen int64, digest string) (builtRelease, bool) {
	k := inlineKey{config: config, digest: digest, gen: gen}
	r.mu.Lock()
	b, ok := r.built[k]
	r.mu.Unlock()
	if ok {
		return b, b.rel != nil
	}
	rel, err := r.releases.Get(ctx, config, gen)
	if err != nil || rel.ContentDigest != digest {
		return builtRelease{}, false
	}
	if len(rel.Content)+len(rel.ValidatorParams) <= maxInlineReleaseBytes {
		b.rel = toProtoRelease(rel, release.StateCandidate, false)
		b.rel.State, b.rel.Revision = pawlv1.ReleaseState_RELEASE_STATE_UNSPECIFIED, 0
		if b.size = proto.Size(b.rel); b.size > maxInlineReleaseBytes {
			b.rel = nil
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bytes+b.size > maxInlineKeptBytes || len(r.built) >= maxInlineKept {
		clear(r.built)
		r.bytes = 0
	}
	if b.rel == nil {
		b.size = 0 // nothing of it is kept
	}
	r.built[k] = b
	r.bytes += b.size
	return b, b.rel != nil
}

// maxInlineKept bounds how many releases inlineReleases keeps, the ones
// too large to go inline included.
const maxInlineKept = 4096

// addReleases puts into msg the releases its assignments name, each
// once, except those held names (the client has them), while they stay
// within maxInlineReleaseBytes; it returns the bytes added.
func (r *inlineReleases) addReleases(ctx context.Context, msg *pawlv1.SessionResponse, held map[inlineKey]bool) int {
	if r == nil || msg.Assignments == nil {
		return 0
	}
	size := 0
	added := map[inlineKey]bool{}
	for _, a := range msg.Assignments.GetAssignments() {
		k := inlineKey{config: a.GetConfigId(), digest: a.GetContentDigest(), gen: a.GetGeneration()}
		if added[k] || held[k] {
			continue
		}
		b, ok := r.get(ctx, k.config, k.gen, k.digest)
		if !ok || size+b.size > maxInlineReleaseBytes {
			continue // a smaller one may still fit
		}
		size += b.size
		added[k] = true
		msg.Releases = append(msg.Releases, b.rel)
	}
	return size
}

// heldReleases reads a hello's held releases.
func heldReleases(hello *pawlv1.SessionHello) map[inlineKey]bool {
	if len(hello.GetHeldReleases()) == 0 {
		return nil
	}
	held := make(map[inlineKey]bool, len(hello.GetHeldReleases()))
	for _, h := range hello.GetHeldReleases() {
		held[inlineKey{config: h.GetConfigId(), digest: h.GetContentDigest(), gen: h.GetGeneration()}] = true
	}
	return held
}
