package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersionAndCompletion: --version names the build; completion prints
// a script listing the flags.
func TestVersionAndCompletion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "pawl-agent ") || !strings.Contains(out.String(), "(commit ") {
		t.Fatalf("pawl-agent --version = %d, %q, %q", code, out.String(), errOut.String())
	}
	for shell, want := range map[string]string{"bash": "--identity", "zsh": "'--dir[", "fish": "complete -c pawl-agent -l exec -r"} {
		out.Reset()
		if code := run(context.Background(), []string{"completion", shell}, &out, &errOut); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("pawl-agent completion %s = %d, %q; want %q", shell, code, out.String(), want)
		}
	}
}
