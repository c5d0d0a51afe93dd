package sdk_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk"
)

// tamperer is a man in the middle on the client's HTTP transport: it
// changes one byte of what the server answers to chosen calls, after the
// server answered: the release in GetRelease answers and in a session's
// messages (its inline releases), the module in Download answers. It asks
// for uncompressed answers so it can read them.
type tamperer struct {
	base http.RoundTripper
	mu   sync.Mutex
	// content flips a byte of a release's content.
	content bool
	// module flips a byte of the module in Download answers.
	module bool
	// minApp replaces a release's minimum app version, when set.
	minApp string
	// sessionOnly leaves GetRelease answers alone: only the releases a
	// session sends inline are changed.
	sessionOnly bool
	// touched counts the answers changed; downloads the GetRelease calls.
	touched, downloads int
}

func (tp *tamperer) RoundTrip(r *http.Request) (*http.Response, error) {
	tp.mu.Lock()
	release := tp.content || tp.minApp != ""
	download := strings.HasSuffix(r.URL.Path, "/GetRelease")
	if download {
		tp.downloads++
	}
	content := release && download && !tp.sessionOnly
	tp.mu.Unlock()
	session := release && strings.HasSuffix(r.URL.Path, "/Session")
	module := tp.module && strings.HasSuffix(r.URL.Path, "/Download")
	if content || module || session {
		r = r.Clone(r.Context())
		r.Header.Del("Accept-Encoding")
		r.Header.Del("Connect-Accept-Encoding")
		r.Header.Del("Grpc-Accept-Encoding")
	}
	resp, err := tp.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK || !(content || module || session) {
		return resp, err
	}
	if session {
		// A stream that lasts: its messages are changed as they pass.
		resp.Body = &sessionTamper{tp: tp, body: resp.Body}
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if content {
		// A unary Connect answer: the message itself.
		var msg pawlv1.GetReleaseResponse
		if err := proto.Unmarshal(body, &msg); err != nil {
			return nil, err
		}
		tp.change(msg.GetRelease())
		if body, err = proto.Marshal(&msg); err != nil {
			return nil, err
		}
	} else {
		// A Connect stream: envelopes of flags, length, message. The
		// second carries the first chunk of the module.
		first := 5 + int(binary.BigEndian.Uint32(body[1:5]))
		body[first+5+100] ^= 0xff
	}
	tp.mu.Lock()
	tp.touched++
	tp.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
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

// sessionTamper changes the inline releases of the session messages it
// reads: each envelope (flags, length, message) whose message carries
// releases is read whole, changed and framed again; the rest pass as
// they are.
type sessionTamper struct {
	tp   *tamperer
	body io.ReadCloser
	out  bytes.Buffer
}

func (st *sessionTamper) Read(p []byte) (int, error) {
	for st.out.Len() == 0 {
		var head [5]byte
		if _, err := io.ReadFull(st.body, head[:]); err != nil {
			return 0, err
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(st.body, msg); err != nil {
			return 0, err
		}
		var resp pawlv1.SessionResponse
		if head[0] == 0 && proto.Unmarshal(msg, &resp) == nil && len(resp.GetReleases()) > 0 {
			for _, rel := range resp.GetReleases() {
				st.tp.change(rel)
			}
			var err error
			if msg, err = proto.Marshal(&resp); err != nil {
				return 0, err
			}
			binary.BigEndian.PutUint32(head[1:], uint32(len(msg)))
			st.tp.mu.Lock()
			st.tp.touched++
			st.tp.mu.Unlock()
		}
		st.out.Write(head[:])
		st.out.Write(msg)
	}
	return st.out.Read(p)
}

func (st *sessionTamper) Close() error { return st.body.Close() }

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
			c.tamper.base = testserver.HTTPClient(t).Transport
			cache := t.TempDir()
			client := h.client(c.id, append(c.opts, sdk.WithHTTPClient(&http.Client{Transport: c.tamper}), sdk.WithCacheDir(cache),
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
			if c.tamper.touched == 0 {
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
	tamper := &tamperer{base: testserver.HTTPClient(t).Transport, content: true, sessionOnly: true}
	client := h.client("inline", sdk.WithHTTPClient(&http.Client{Transport: tamper}), sdk.WithDownloadAttempts(1),
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
	tamper := &tamperer{base: testserver.HTTPClient(t).Transport, minApp: "2.1.0"}
	client := h.client("old", sdk.WithHTTPClient(&http.Client{Transport: tamper}),
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
