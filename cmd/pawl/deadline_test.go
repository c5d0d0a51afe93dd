package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestACallThatGetsNoAnswerEndsAtTheTimeout: a server that takes the
// request and never answers. The CLI says what it waits for, gives up
// at --timeout, and says which call ran out of time and which flag sets
// it.
func TestACallThatGetsNoAnswerEndsAtTheTimeout(t *testing.T) {
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select { // never answer
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer silent.Close()
	defer close(release)
	for _, args := range [][]string{
		{"get", "/x"},
		{"rollout", "status", "payments"},
		{"promote", "payments", "1", "--protocol", "grpc"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--server", silent.URL, "--timeout", "1s"}, args...), strings.NewReader(""), &stdout, &stderr)
		errOut := stderr.String()
		if code != 1 || !strings.Contains(errOut, "pawl: waiting for "+silent.URL+" to answer ") ||
			!strings.Contains(errOut, "no answer from "+silent.URL) || !strings.Contains(errOut, "within 1s (--timeout)") {
			t.Fatalf("pawl %s against a silent server = %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
	}

	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--server", silent.URL, "--timeout", "0s", "get", "/x"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 2 {
		t.Fatalf("--timeout 0s exited %d (%q), want 2", code, stderr.String())
	}
}
