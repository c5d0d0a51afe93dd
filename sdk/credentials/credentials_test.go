package credentials_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/sdk/credentials"
)

func TestTokensAndTheirHashes(t *testing.T) {
	a, err := credentials.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := credentials.NewToken()
	if !regexp.MustCompile(`^pawl_[A-Za-z0-9_-]{43}$`).MatchString(a) || a == b {
		t.Fatalf("tokens %q and %q", a, b)
	}
	// echo -n pawl_test | sha256sum
	if got, want := credentials.HashToken("pawl_test"), "sha256:e94f2fb24b4a6037677f2588f3a3f68e049ae625811a6cad8baa17e0e7b104c4"; got != want {
		t.Fatalf("HashToken = %s, want %s", got, want)
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.255.0.9": true, "::1": true, "[::1]": true, "localhost": true, "LocalHost": true, "::ffff:127.0.0.1": true,
		"": false, "10.0.0.1": false, "128.0.0.1": false, "::2": false, "localhost.example.com": false, "127.0.0.1.nip.io": false, "0.0.0.0": false, "::": false,
	} {
		if got := credentials.IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v", host, got)
		}
	}
	for url, refused := range map[string]bool{
		"http://10.0.0.1:7070": true, "http://pawl:7070/base": true, "https://10.0.0.1:7070": false, "http://127.0.0.1:7070": false, "http://[::1]:1": false,
	} {
		err := credentials.RefuseClearText(url)
		if refused != errors.Is(err, credentials.ErrClearText) || refused && !strings.Contains(err.Error(), url) {
			t.Errorf("RefuseClearText(%s) = %v", url, err)
		}
	}
}

// TestATokenFileIsReadAgainWhenItChanges: a file replaced by a rename, or
// rewritten with a token of another length, gives the new token; a file
// gone or emptied leaves the last token in use, with an error.
func TestATokenFileIsReadAgainWhenItChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := credentials.NewTokenFile(path); err == nil {
		t.Fatal("NewTokenFile of a missing file succeeded")
	}
	write("\n")
	if _, err := credentials.NewTokenFile(path); err == nil {
		t.Fatal("NewTokenFile of an empty file succeeded")
	}
	write("two words")
	if _, err := credentials.NewTokenFile(path); err == nil {
		t.Fatal("NewTokenFile of a file with two words succeeded")
	}
	write("pawl_one\n")
	f, err := credentials.NewTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(want string, wantErr bool) {
		t.Helper()
		got, err := f.Token()
		if got != want || (err != nil) != wantErr {
			t.Fatalf("Token() = %q, %v; want %q (an error: %v)", got, err, want, wantErr)
		}
	}
	expect("pawl_one", false)
	write("pawl_two")
	expect("pawl_two", false)
	if err := os.WriteFile(path, []byte("pawl_three\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expect("pawl_three", false)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expect("pawl_three", true)
	write("")
	expect("pawl_three", true)
	write("pawl_four")
	expect("pawl_four", false)
}

// TestBearerChecksEveryRequest: the transport adds the token to a request
// to loopback, and refuses one in clear text to any other host without
// handing it to the transport underneath.
func TestBearerChecksEveryRequest(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Get("Authorization") }))
	defer srv.Close()
	base := srv.Client().Transport
	client := &http.Client{Transport: credentials.Bearer(base, credentials.StaticToken("pawl_t"))}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != "Bearer pawl_t" {
		t.Fatalf("the server saw Authorization %q", got)
	}
	sent := false
	guarded := credentials.Bearer(roundTripper(func(*http.Request) (*http.Response, error) {
		sent = true
		return nil, errors.New("sent")
	}), credentials.StaticToken("pawl_t"))
	req, _ := http.NewRequest(http.MethodPost, "http://10.1.2.3:7070/pawl.v1.KVService/Get", strings.NewReader("{}"))
	if _, err := guarded.RoundTrip(req); !errors.Is(err, credentials.ErrClearText) || sent {
		t.Fatalf("a request in clear text to 10.1.2.3: %v (handed on: %v)", err, sent)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
