package sdk_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/sdk"
)

// tamperer changes what the server answers to chosen calls, through a
// faultproxy.Rewriter (a man in the middle): the release in GetRelease
// answers and in a session's messages (its inline releases), the module
// in Download answers.
type tamperer struct {
	mu sync.Mutex
	// content flips a byte of a release's content.
	content bool
	// module flips a byte of the module in Download answers.
	module bool
	// minApp replaces a release's minimum app version, when set.
	minApp string
	// sessionOnly leaves GetRelease answers alone: only the releases a
	// session sends inline are changed.
	sessionOnly bool
	// touched counts the messages changed; downloads the GetRelease calls.
	touched, downloads int
}

// url returns the address of a man in the middle before h's server that
// tampers as tp is set to. It lives as long as h's clients: until h's
// test ends.
func (tp *tamperer) url(h *harness) string {
	return faultproxy.NewRewriter(h.t, h.srv.URL, tp.edit).URL
}

// edit is the Rewriter's faultproxy.Edit.
func (tp *tamperer) edit(procedure string, msg proto.Message, request bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	release := tp.content || tp.minApp != ""
	switch m := msg.(type) {
	case *pawlv1.GetReleaseRequest:
		tp.downloads++
	case *pawlv1.GetReleaseResponse:
		if release && !tp.sessionOnly {
			tp.change(m.GetRelease())
			tp.touched++
		}
	case *pawlv1.SessionResponse:
		if release && len(m.GetReleases()) > 0 {
			for _, rel := range m.GetReleases() {
				tp.change(rel)
			}
			tp.touched++
		}
	case *pawlv1.DownloadResponse:
		if c := m.GetChunk(); tp.module && len(c) > 100 {
			c[100] ^= 0xff
			tp.touched++
		}
	}
}

// change changes a release as the tamperer is set to.
func (tp *tamperer) change(rel *pawlv1.Release) {
	if tp.minApp != "" {
		rel.GetSpec().MinAppVersion = tp.minApp
		return
	}
	c := rel.GetSpec().GetContent()
	i := bytes.IndexAny(c, "0123456789")
	c[i] = '0' + (c[i]-'0'+1)%10 // still valid JSON, another routing table
}

// TestTamperedDownloadsAreRejectedAndNeverApplied: a content byte changed
// on the way, or a validator module that does not hash to its digest,
// ends in REJECTED with the reason; nothing is applied, and nothing is
// cached.
func TestTamperedDownloadsAreRejectedAndNeverApplied(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		id     string
		tamper *tamperer
		reason string
		// counted: a rejection with the release's content digest counts
		// against the stage; one with another digest (the instance
		// reports what it computed) is kept for audit only.
		counted bool
		opts    []sdk.Option
	}{
		// On a session, the release comes inline with its assignment.
		{"content", &tamperer{content: true}, "content digest mismatch: the content hashes to sha256:", false, nil},
		{"content-download", &tamperer{content: true}, "content digest mismatch: the content hashes to sha256:", false,
			[]sdk.Option{sdk.WithoutSession()}},
		{"module", &tamperer{module: true}, "wrong validator: the module downloaded hashes to sha256:", true, nil},
	} {
		t.Run(c.id, func(t *testing.T) {
			cache := t.TempDir()
			client := h.clientAt(c.tamper.url(h), c.id, append(c.opts, sdk.WithCacheDir(cache),
				sdk.WithLabels(map[string]string{"instance": c.id}),
				// A runtime of its own: one that other clients of this
				// process share may hold the module already, and then
				// nothing is downloaded to tamper with.
				sdk.WithCompiledCacheDir(t.TempDir()))...)
			h.waitRegistered(c.id)
			rel := h.release(50, func(spec *pawlv1.ReleaseSpec) {
				spec.Selector = map[string]string{"instance": c.id}
			})
			states, last := h.awaitRejected(rel.GetGeneration(), c.id)
			if want := []string{"DISCOVERED", "DOWNLOADED", "REJECTED"}; strings.Join(states, ",") != strings.Join(want, ",") {
				t.Fatalf("reported %v, want %v", states, want)
			}
			if !strings.Contains(last.GetReason(), c.reason) || last.GetCounted() != c.counted {
				t.Fatalf("REJECTED = %v", last)
			}
			if s := client.Config("routing"); s != nil {
				t.Fatalf("applied %s after a tampered download", s)
			}
			c.tamper.mu.Lock()
			touched := c.tamper.touched
			c.tamper.mu.Unlock()
			if touched == 0 {
				t.Fatal("nothing was tampered with")
			}
			for _, dir := range []string{"releases", "validators", "applied"} {
				if entries, _ := os.ReadDir(filepath.Join(cache, dir)); len(entries) != 0 {
					t.Fatalf("the cache kept %s/%v", dir, entries)
				}
			}
		})
	}
}

// TestACorruptedInlineReleaseIsDownloadedAgain: a release the session
// sent inline with its assignment, changed on the way, is verified as a
// download is: it does not hash to the assignment's digest, so it is not
// applied; the client downloads the release (GetRelease), which matches,
// and applies that. The inline copy is not a download: a client allowed
// one download gets it.
func TestACorruptedInlineReleaseIsDownloadedAgain(t *testing.T) {
	h := newHarness(t)
	tamper := &tamperer{content: true, sessionOnly: true}
	client := h.clientAt(tamper.url(h), "inline", sdk.WithDownloadAttempts(1),
		sdk.WithLabels(map[string]string{"instance": "inline"}))
	h.waitRegistered("inline")
	rel := h.release(50, func(spec *pawlv1.ReleaseSpec) {
		spec.Selector = map[string]string{"instance": "inline"}
	})
	s := has(t, client, rel.GetGeneration())
	if !bytes.Equal(s.Content, rel.GetSpec().GetContent()) {
		t.Fatalf("applied %q, want the release's %q", s.Content, rel.GetSpec().GetContent())
	}
	tamper.mu.Lock()
	defer tamper.mu.Unlock()
	if tamper.touched == 0 || tamper.downloads != 1 {
		t.Fatalf("%d inline releases changed, %d downloads: want some changed, then one download", tamper.touched, tamper.downloads)
	}
}

// TestAValidationPastTheLimitIsRejected: the server accepted the release
// under its own limit; an instance whose limit is shorter stops its
// validation there, tries twice more (a starved machine can stop a run
// that passes on a quiet one), and then reports REJECTED with the reason,
// applying nothing.
func TestAValidationPastTheLimitIsRejected(t *testing.T) {
	h := newHarness(t)
	client := h.client("slow", sdk.WithValidatorTimeout(time.Microsecond), // a runtime of its own, with that limit
		sdk.WithLabels(map[string]string{"instance": "slow"}))
	h.waitRegistered("slow")
	rel := h.release(50, func(spec *pawlv1.ReleaseSpec) {
		spec.Selector = map[string]string{"instance": "slow"}
	})
	_, last := h.awaitRejected(rel.GetGeneration(), "slow")
	if !strings.Contains(last.GetReason(), "ran longer than the 1µs limit and was stopped (3 attempts)") {
		t.Fatalf("REJECTED = %v", last)
	}
	if s := client.Config("routing"); s != nil {
		t.Fatalf("applied %s after a validation that was stopped", s)
	}
}

// TestAnAppTooOldRejectsTheRelease: the server never assigns a release
// to an instance whose app is older than the release's minimum, so the
// instance's own check is met only when the server's answer says more
// than the assignment did: here a man in the middle raises the minimum in
// the release it downloads. The instance reports REJECTED with the
// reason, and applies nothing.
func TestAnAppTooOldRejectsTheRelease(t *testing.T) {
	h := newHarness(t)
	tamper := &tamperer{minApp: "2.1.0"}
	client := h.clientAt(tamper.url(h), "old",
		sdk.WithLabels(map[string]string{"instance": "old"}))
	h.waitRegistered("old")
	rel := h.release(50, func(spec *pawlv1.ReleaseSpec) {
		spec.Selector = map[string]string{"instance": "old"}
	})
	_, last := h.awaitRejected(rel.GetGeneration(), "old")
	if want := `app version too old: "2.0.0" is below the release's minimum "2.1.0"`; last.GetReason() != want {
		t.Fatalf("REJECTED reason %q, want %q", last.GetReason(), want)
	}
	if s := client.Config("routing"); s != nil {
		t.Fatalf("applied %s on an app too old for it", s)
	}
}
