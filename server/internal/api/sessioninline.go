package api

import (
	"context"
	"sync"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// maxInlineReleaseBytes is about the most content and validator
// parameter bytes of releases that one SessionResponse carries with its
// assignments (SessionHello.inline_releases); a release that does not fit
// is left out, and the instance downloads it.
const maxInlineReleaseBytes = 1 << 20

// inlineReleases builds the releases that sessions send with their
// assignments, once per release for every session: a promotion to
// 10,000 instances then builds one message of its release, not 10,000,
// and no instance calls GetRelease. A release's spec, content and digest
// never change, and its state and revision (which do) are left out, so a
// built release is good for as long as it is kept. It keeps at most
// maxInlineKept, which a fleet's assignments at one time name far fewer
// of; when it is full it starts over.
type inlineReleases struct {
	releases *release.Releases
	mu       sync.Mutex
	built    map[inlineKey]*pawlv1.Release
}

// maxInlineKept bounds the releases inlineReleases keeps built.
const maxInlineKept = 1024

// inlineKey names a release by its digest too: a store restored from a
// backup may hold another content at the same generation.
type inlineKey struct {
	config, digest string
	gen            int64
}

func newInlineReleases(r *release.Releases) *inlineReleases {
	return &inlineReleases{releases: r, built: map[inlineKey]*pawlv1.Release{}}
}

// get returns the release config gen with the content digest as
// sessions send it: shared, so never to be changed. ok is false when it
// cannot be read now, or has another digest; the instance then downloads
// it, and that call reports why.
func (r *inlineReleases) get(ctx context.Context, config string, gen int64, digest string) (*pawlv1.Release, bool) {
	k := inlineKey{config: config, digest: digest, gen: gen}
	r.mu.Lock()
	out := r.built[k]
	r.mu.Unlock()
	if out != nil {
		return out, true
	}
	rel, err := r.releases.Get(ctx, config, gen)
	if err != nil || rel.ContentDigest != digest {
		return nil, false
	}
	out = toProtoRelease(rel, release.StateCandidate, false)
	out.State, out.Revision = pawlv1.ReleaseState_RELEASE_STATE_UNSPECIFIED, 0
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.built) >= maxInlineKept {
		clear(r.built)
	}
	r.built[k] = out
	return out, true
}

// addReleases puts into msg the releases its assignments name, each
// once, while they stay within maxInlineReleaseBytes.
func (r *inlineReleases) addReleases(ctx context.Context, msg *pawlv1.SessionResponse) {
	if r == nil || msg.Assignments == nil {
		return
	}
	size := 0
	for _, a := range msg.Assignments.GetAssignments() {
		if containsRelease(msg.Releases, a.GetConfigId(), a.GetGeneration()) {
			continue
		}
		rel, ok := r.get(ctx, a.GetConfigId(), a.GetGeneration(), a.GetContentDigest())
		if !ok {
			continue
		}
		n := len(rel.GetSpec().GetContent()) + len(rel.GetSpec().GetValidatorParams())
		if size+n > maxInlineReleaseBytes {
			continue // a smaller one may still fit
		}
		size += n
		msg.Releases = append(msg.Releases, rel)
	}
}

func containsRelease(rels []*pawlv1.Release, config string, gen int64) bool {
	for _, r := range rels {
		if r.GetSpec().GetConfigId() == config && r.GetGeneration() == gen {
			return true
		}
	}
	return false
}
