//go:build unix

package quickstart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTheQuickstartRuns runs run.sh, the README's walkthrough, against the
// real pawld and agents it starts, and fails with its output if any step
// does.
func TestTheQuickstartRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("the quickstart builds the binaries and two validators, and rolls out two releases: skipped under -short")
	}
	if os.Getenv("PAWL_TEST_STORE") == "redis" {
		t.Skip("the quickstart runs pawld on its embedded store; the Redis pass has nothing to add")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on PATH")
	}
	// Generous: on a loaded machine the first build of the validators takes
	// minutes. Each of the script's own waits is bounded too.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "run.sh")
	// pawld's validator limit (PAWL_VALIDATOR_TIMEOUT, its
	// --validator-timeout) is wall-clock time, and the Go runtime's start
	// in the JSON Schema validator, which its upload runs, has taken
	// longer than the 1 s default on two cores loaded by other test
	// packages under -race. The walkthrough tests no time limit: it gets
	// generous ones, for the validation and for the compilation
	// (PAWL_VALIDATOR_COMPILE_TIMEOUT), as the servers of
	// internal/testkit/testserver do.
	cmd.Env = append(os.Environ(), "PAWL_QUICKSTART_TIMEOUT=300", "PAWL_VALIDATOR_TIMEOUT=30s", "PAWL_VALIDATOR_COMPILE_TIMEOUT=10m")
	// The script and everything it starts share a process group: on a
	// timeout the whole group gets SIGTERM (the script's trap then stops
	// pawld and the agents), and SIGKILL after WaitDelay.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "# quickstart: every step passed") {
		t.Fatalf("run.sh exited 0 without reaching its end:\n%s", out.String())
	}
}

// TestTheReadmeShowsTheScriptsCommands checks that the README's
// walkthrough block and run.sh run the same pawld, pawl and pawl-agent commands,
// no more and no fewer.
func TestTheReadmeShowsTheScriptsCommands(t *testing.T) {
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block, err := walkthroughBlock(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	fromScript, fromReadme := scriptCommands(string(script)), readmeCommands(block)
	if len(fromScript) < 20 {
		t.Fatalf("found only %d commands in run.sh: %q", len(fromScript), fromScript)
	}
	for _, c := range fromReadme {
		if !slices.Contains(fromScript, c) {
			t.Errorf("the README's walkthrough shows a command run.sh does not run:\n\t%s", c)
		}
	}
	for _, c := range fromScript {
		if !slices.Contains(fromReadme, c) {
			t.Errorf("run.sh runs a command the README's walkthrough does not show:\n\t%s", c)
		}
	}
}

const (
	beginMarker = "<!-- quickstart:begin (examples/quickstart/run.sh runs these commands; a test checks) -->"
	endMarker   = "<!-- quickstart:end -->"
)

// walkthroughBlock is the README's text between the walkthrough's markers.
func walkthroughBlock(readme string) (string, error) {
	_, rest, ok := strings.Cut(readme, beginMarker)
	if !ok {
		return "", fmt.Errorf("README.md has no line %q", beginMarker)
	}
	block, _, ok := strings.Cut(rest, endMarker)
	if !ok {
		return "", fmt.Errorf("README.md has no line %q after %q", endMarker, beginMarker)
	}
	return block, nil
}

// scriptRun finds a command the script echoes and runs: the words after
// "step" or after `background "LOG"`, up to a pipe, a ")" or a ";".
var scriptRun = regexp.MustCompile(`(?:^|[\s(])(?:step|background "[^"]*")\s+(pawl(?:d|-agent)?\s[^|);]*)`)

// scriptCommands lists the commands run.sh runs through step and
// background, with continuation lines joined and spaces collapsed.
func scriptCommands(script string) []string {
	var out []string
	for _, line := range logicalLines(script) {
		for _, m := range scriptRun.FindAllStringSubmatch(line, -1) {
			out = append(out, normalize(m[1]))
		}
	}
	return out
}

// readmeCommands lists the pawld, pawl and pawl-agent commands of the README's
// block, without their comments and a trailing "&".
func readmeCommands(block string) []string {
	var out []string
	for _, line := range logicalLines(block) {
		line, _, _ = strings.Cut(line, " #")
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "pawl ") || strings.HasPrefix(line, "pawld ") || strings.HasPrefix(line, "pawl-agent ") {
			out = append(out, normalize(strings.TrimSuffix(line, "&")))
		}
	}
	return out
}

// logicalLines joins lines that end in a backslash with the next.
func logicalLines(text string) []string {
	return strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n")
}

func normalize(cmd string) string { return strings.Join(strings.Fields(cmd), " ") }
